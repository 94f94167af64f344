// binning_memory_resource: bins from exponents, routing by size (allocate and
// deallocate), custom bins, aggregated info and release, forwarding.

#include <gpumem/binning_memory_resource.hpp>
#include <gpumem/pool_memory_resource.hpp>

#include <support/arena_test_resource.hpp>
#include <support/host_test_resource.hpp>

#include <gtest/gtest.h>

#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

std::vector<std::size_t> bin_sizes(binning_memory_resource const& b) {
  std::vector<std::size_t> out;
  for (auto const& [size, r] : b.bins()) out.push_back(size);
  return out;
}

bool inside(void* p, test::arena_test_resource::call const& c) {
  auto* q = static_cast<char*>(p);
  auto* base = static_cast<char*>(c.ptr);
  return q >= base && q < base + c.bytes;
}

TEST(Binning, BadArgumentsThrow) {
  test::arena_test_resource arena{4 * MiB};
  EXPECT_THROW(binning_memory_resource(nullptr), logic_error);
  EXPECT_THROW(binning_memory_resource(&arena, 7, 10), logic_error);
  EXPECT_THROW(binning_memory_resource(&arena, 10, 9), logic_error);
  EXPECT_THROW(binning_memory_resource(&arena, 8, 63), logic_error);
  binning_memory_resource b{&arena};
  EXPECT_THROW(b.add_bin(0), logic_error);
  EXPECT_TRUE(arena.allocations().empty());
}

TEST(Binning, ExponentsMakePowerOfTwoBins) {
  test::arena_test_resource arena{8 * MiB};
  binning_memory_resource b{&arena, 8, 12};
  EXPECT_EQ(bin_sizes(b), (std::vector<std::size_t>{256, 512, 1024, 2048, 4096}));
  // Each owned bin preallocated 128 blocks of its size from the upstream.
  std::vector<std::size_t> chunks;
  for (auto const& c : arena.allocations()) chunks.push_back(c.bytes);
  EXPECT_EQ(chunks, (std::vector<std::size_t>{32 * KiB, 64 * KiB, 128 * KiB, 256 * KiB, 512 * KiB}));
}

TEST(Binning, LargeOwnedBinsGrowInChunksOfAboutTwoMiB) {
  test::arena_test_resource arena{64 * MiB};
  binning_memory_resource b{&arena, 14, 20};
  std::vector<std::size_t> chunks;
  for (auto const& c : arena.allocations()) chunks.push_back(c.bytes);
  // 16 KiB x 128 = 2 MiB; from 32 KiB up, 2 MiB / size blocks, at least 2.
  EXPECT_EQ(chunks, (std::vector<std::size_t>{2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB}));
  EXPECT_EQ(b.info().reserved_bytes, 14 * MiB);
}

TEST(Binning, RoutesBySize) {
  test::arena_test_resource arena{8 * MiB};
  binning_memory_resource b{&arena, 8, 12};
  auto const& bins = b.bins();
  EXPECT_EQ(b.resource_for(1), bins[0].second);
  EXPECT_EQ(b.resource_for(256), bins[0].second);
  EXPECT_EQ(b.resource_for(257), bins[1].second);
  EXPECT_EQ(b.resource_for(4096), bins[4].second);
  EXPECT_EQ(b.resource_for(4097), &arena);

  auto const chunks = arena.allocations();
  void* small = b.allocate(3000);
  EXPECT_TRUE(inside(small, chunks[4]));  // the 4 KiB bin's chunk
  void* tiny = b.allocate(10);
  EXPECT_TRUE(inside(tiny, chunks[0]));
  EXPECT_EQ(b.allocate(0), nullptr);

  void* large = b.allocate(5000);  // straight to the upstream
  ASSERT_EQ(arena.allocations().size(), 6U);
  EXPECT_EQ(arena.allocations()[5].ptr, large);
  EXPECT_EQ(arena.allocations()[5].bytes, 5000U);

  b.deallocate(large, 5000);  // routed by size: back to the upstream
  ASSERT_EQ(arena.deallocations().size(), 1U);
  EXPECT_EQ(arena.deallocations()[0].ptr, large);
  b.deallocate(small, 3000);  // back to its bin: reused at once
  EXPECT_EQ(b.allocate(4000), small);
  b.deallocate(small, 4000);
  b.deallocate(tiny, 10);
  b.deallocate(nullptr, 10);
  EXPECT_EQ(arena.bad_frees(), 0U);
}

TEST(Binning, CustomBins) {
  test::arena_test_resource arena{8 * MiB};
  test::arena_test_resource custom{MiB};
  binning_memory_resource b{&arena, 8, 10};
  auto* const bin1k = b.resource_for(1024);
  b.add_bin(1000);  // rounds to 1024: the existing bin is kept
  EXPECT_EQ(b.resource_for(1024), bin1k);
  EXPECT_EQ(bin_sizes(b), (std::vector<std::size_t>{256, 512, 1024}));

  b.add_bin(8 * KiB, &custom);  // a new, larger bin
  EXPECT_EQ(bin_sizes(b), (std::vector<std::size_t>{256, 512, 1024, 8192}));
  void* p = b.allocate(6000);
  ASSERT_EQ(custom.allocations().size(), 1U);
  EXPECT_EQ(custom.allocations()[0].ptr, p);
  b.deallocate(p, 6000);
  EXPECT_EQ(custom.deallocations().size(), 1U);

  b.add_bin(100, &custom);  // replaces the 256-byte bin
  EXPECT_EQ(b.resource_for(100), &custom);
  EXPECT_EQ(bin_sizes(b), (std::vector<std::size_t>{256, 512, 1024, 8192}));
}

TEST(Binning, InfoCountsBinBlocksAsFree) {
  test::arena_test_resource arena{8 * MiB};
  binning_memory_resource b{&arena, 8, 9};  // chunks of 32 KiB and 64 KiB
  auto i = b.info();
  EXPECT_EQ(i.reserved_bytes, 96 * KiB);
  EXPECT_EQ(i.used_bytes, 0U);
  EXPECT_EQ(i.free_bytes, 96 * KiB);
  EXPECT_EQ(i.largest_free_block, 512U);

  void* s = b.allocate(100);
  void* l = b.allocate(10000);  // upstream: 10240 bytes once rounded
  i = b.info();
  EXPECT_EQ(i.reserved_bytes, 96 * KiB + 10240);
  EXPECT_EQ(i.used_bytes, 256U + 10240U);
  EXPECT_EQ(i.free_bytes, 96 * KiB - 256);
  b.deallocate(s, 100);
  b.deallocate(l, 10000);
}

TEST(Binning, ReleaseAggregatesBinsAndUpstream) {
  test::arena_test_resource arena{8 * MiB};
  pool_memory_resource pool{&arena, pool_options{0, std::nullopt, MiB}};
  binning_memory_resource b{&pool, 8, 9};
  void* s = b.allocate(300);     // 512 bin
  void* l = b.allocate(100000);  // the pool
  EXPECT_EQ(pool.pool_size(), MiB);
  b.deallocate(l, 100000);
  // The 256 bin's chunk is free; the 512 bin's is not. The pool then gives back
  // nothing: its one slab still holds the 512 bin's chunk.
  EXPECT_EQ(b.release(), 32 * KiB);
  EXPECT_EQ(pool.info().used_bytes, 64 * KiB);
  b.deallocate(s, 300);
  EXPECT_EQ(b.release(), 64 * KiB + MiB);  // the last chunk, then the pool's slab
  EXPECT_EQ(pool.pool_size(), 0U);
  EXPECT_EQ(arena.live_bytes(), 0U);
}

TEST(Binning, ForwardsStreamDestroyed) {
  test::host_test_resource up;
  binning_memory_resource b{&up, 8, 8};
  b.stream_destroyed(stream_ref{reinterpret_cast<cudaStream_t>(0x1000)});
  EXPECT_GE(up.stream_destroyed_calls(), 1);
}

}  // namespace
}  // namespace gpumem
