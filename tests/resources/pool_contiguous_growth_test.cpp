// pool_memory_resource over an upstream that grows contiguously (as
// vmm_memory_resource does; here arena_test_resource in its contiguous mode): the
// pool joins each growth to the region it continues, grows only by what the free
// block at its end lacks, coalesces across the seam, and gives every piece back
// on its own.

#include <gpumem/call_context.hpp>
#include <gpumem/pool_memory_resource.hpp>

#include <support/arena_test_resource.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::vector<std::size_t> sizes_of(std::vector<test::arena_test_resource::call> const& calls) {
  std::vector<std::size_t> out;
  for (auto const& c : calls) out.push_back(c.bytes);
  return out;
}

char* as_char(void* p) { return static_cast<char*>(p); }

pool_options opts(std::size_t initial) { return pool_options{initial, {}, 2 * MiB}; }

TEST(PoolContiguousGrowth, GrowsByWhatTheFreeTailLacks) {
  test::arena_test_resource arena{256 * MiB};
  arena.contiguous(2 * MiB);
  pool_memory_resource pool{&arena, opts(0)};
  void* a = pool.allocate(3 * MiB);
  EXPECT_EQ(pool.pool_size(), 4 * MiB);  // rounded to the granularity
  pool.deallocate(a, 3 * MiB);
  // 4 MiB free at the end of the pool: growing by 6 MiB more serves 10 MiB.
  void* b = pool.allocate(10 * MiB);
  EXPECT_EQ(b, a);
  EXPECT_EQ(pool.pool_size(), 10 * MiB);
  EXPECT_EQ(sizes_of(arena.allocations()), (std::vector<std::size_t>{4 * MiB, 6 * MiB}));
  pool.deallocate(b, 10 * MiB);
  EXPECT_EQ(pool.info().largest_free_block, 10 * MiB);

  // Released piece by piece, each as the upstream handed it out.
  EXPECT_EQ(pool.release(), 10 * MiB);
  EXPECT_EQ(sizes_of(arena.deallocations()), (std::vector<std::size_t>{4 * MiB, 6 * MiB}));
  EXPECT_EQ(arena.bad_frees(), 0U);
  EXPECT_EQ(arena.live_bytes(), 0U);
}

// The preferred step (1/64 of the pool) counts the free tail: a request the tail
// almost serves grows the pool by what it lacks, not by another whole step.
TEST(PoolContiguousGrowth, TheFreeTailCountsTowardThePreferredStep) {
  test::arena_test_resource arena{2048 * MiB};
  arena.contiguous(2 * MiB);
  pool_memory_resource pool{&arena, opts(0)};
  void* a = pool.allocate(1000 * MiB);
  void* b = pool.allocate(10 * MiB);  // a step of 1/64 of the pool: 16 MiB
  EXPECT_EQ(pool.pool_size(), 1016 * MiB);
  pool.deallocate(b, 10 * MiB);  // 16 MiB free at the end
  void* c = pool.allocate(20 * MiB);
  EXPECT_EQ(c, b);
  // 4 MiB more serve it; the 16 MiB tail already is a whole step.
  EXPECT_EQ(pool.pool_size(), 1020 * MiB);
  EXPECT_EQ(sizes_of(arena.allocations()), (std::vector<std::size_t>{1000 * MiB, 16 * MiB, 4 * MiB}));
  // With less free at the end, the step is topped up to 1/64 of the pool again.
  void* d = pool.allocate(MiB);  // 1020 / 64 = 15.9 MiB, rounded up to 16
  EXPECT_EQ(pool.pool_size(), 1036 * MiB);
  pool.deallocate(d, MiB);
  pool.deallocate(c, 20 * MiB);
  pool.deallocate(a, 1000 * MiB);
}

TEST(PoolContiguousGrowth, WithoutItAdjacentSlabsStayApart) {
  test::arena_test_resource arena{256 * MiB};  // adjacent allocations, but separate ones
  pool_memory_resource pool{&arena, opts(0)};
  void* a = pool.allocate(3 * MiB);
  pool.deallocate(a, 3 * MiB);
  void* b = pool.allocate(10 * MiB);
  EXPECT_NE(b, a);
  EXPECT_EQ(pool.pool_size(), 13 * MiB);
  pool.deallocate(b, 10 * MiB);
  EXPECT_EQ(pool.info().largest_free_block, 10 * MiB);  // the 3 MiB slab does not join
}

TEST(PoolContiguousGrowth, ABlockAcrossTheSeamIsFreedAndCoalesces) {
  test::arena_test_resource arena{256 * MiB};
  arena.contiguous(2 * MiB);
  pool_memory_resource pool{&arena, opts(4 * MiB)};
  void* x = pool.allocate(MiB);
  // This thread now remembers the region as 4 MiB long (the lookup hint of a free).
  void* y = pool.allocate(256);
  pool.deallocate(y, 256);
  // 3 MiB free at the end: the pool grows by 4 MiB (rounded) and the 6 MiB block
  // starts in the first piece and ends in the second.
  void* z = pool.allocate(6 * MiB);
  EXPECT_EQ(as_char(z), as_char(x) + MiB);
  EXPECT_EQ(pool.pool_size(), 8 * MiB);
  EXPECT_EQ(arena.allocations().size(), 2U);
  pool.deallocate(z, 6 * MiB);  // a stale hint would call it past the region's end
  auto const i = pool.info();
  EXPECT_EQ(i.used_bytes, MiB);
  EXPECT_EQ(i.largest_free_block, 7 * MiB);
  pool.deallocate(x, MiB);
  EXPECT_EQ(pool.info().largest_free_block, 8 * MiB);
}

TEST(PoolContiguousGrowth, SynchronousRequestsContinueTheCleanTail) {
  test::arena_test_resource arena{256 * MiB};
  arena.contiguous(2 * MiB);
  pool_memory_resource pool{&arena, opts(0)};
  scoped_synchronous_call sync;
  void* a = pool.allocate(3 * MiB);
  EXPECT_EQ(pool.pool_size(), 4 * MiB);
  // 1 MiB left clean at the end: 2 MiB more serve the next 3 MiB right after `a`.
  void* b = pool.allocate(3 * MiB);
  EXPECT_EQ(as_char(b), as_char(a) + 3 * MiB);
  EXPECT_EQ(pool.pool_size(), 6 * MiB);
  pool.deallocate(b, 3 * MiB);
  pool.deallocate(a, 3 * MiB);
}

TEST(PoolContiguousGrowth, ReleaseGivesBackTheFreePiecesAtTheEnd) {
  test::arena_test_resource arena{256 * MiB};
  arena.contiguous(2 * MiB);
  pool_memory_resource pool{&arena, opts(0)};
  void* a = pool.allocate(2 * MiB);  // piece [0, 2)
  void* d = pool.allocate(MiB);      // piece [2, 4); d = [2, 3)
  void* b = pool.allocate(5 * MiB);  // the free MiB at the end and piece [4, 8)
  void* c = pool.allocate(4 * MiB);  // piece [8, 12)
  EXPECT_EQ(as_char(b), as_char(a) + 3 * MiB);
  EXPECT_EQ(pool.pool_size(), 12 * MiB);
  EXPECT_EQ(sizes_of(arena.allocations()), (std::vector<std::size_t>{2 * MiB, 2 * MiB, 4 * MiB, 4 * MiB}));
  pool.deallocate(b, 5 * MiB);
  pool.deallocate(c, 4 * MiB);
  // Free [3, 12): the pieces starting inside it go back; [3, 4) stays, its piece holds d.
  EXPECT_EQ(pool.release(), 8 * MiB);
  EXPECT_EQ(pool.pool_size(), 4 * MiB);
  EXPECT_EQ(sizes_of(arena.deallocations()), (std::vector<std::size_t>{4 * MiB, 4 * MiB}));
  EXPECT_EQ(arena.bad_frees(), 0U);
  auto const i = pool.info();
  EXPECT_EQ(i.used_bytes, 3 * MiB);
  EXPECT_EQ(i.largest_free_block, MiB);
  // Growing again continues the shortened region (the upstream maps at its end).
  void* e = pool.allocate(6 * MiB);
  EXPECT_EQ(pool.pool_size(), 10 * MiB);
  EXPECT_EQ(arena.allocations().back().ptr, as_char(a) + 4 * MiB);
  pool.deallocate(e, 6 * MiB);
  pool.deallocate(d, MiB);
  pool.deallocate(a, 2 * MiB);
  EXPECT_EQ(pool.release(), 10 * MiB);  // whole again: every piece back
  EXPECT_EQ(arena.live_bytes(), 0U);
  EXPECT_EQ(arena.bad_frees(), 0U);
}

TEST(PoolContiguousGrowth, DestructorReturnsEveryPiece) {
  test::arena_test_resource arena{256 * MiB};
  arena.contiguous(2 * MiB);
  {
    pool_memory_resource pool{&arena, opts(2 * MiB)};
    void* a = pool.allocate(2 * MiB);
    void* b = pool.allocate(8 * MiB);  // joins: one region of two pieces
    EXPECT_EQ(pool.pool_size(), 10 * MiB);
    static_cast<void>(a);
    static_cast<void>(b);  // still in use: the destructor returns the pieces anyway
  }
  EXPECT_EQ(sizes_of(arena.deallocations()), (std::vector<std::size_t>{2 * MiB, 8 * MiB}));
  EXPECT_EQ(arena.bad_frees(), 0U);
  EXPECT_EQ(arena.live_bytes(), 0U);
}

/// A block a test thread holds: its first and last bytes carry its tag.
struct held {
  unsigned char* p;
  std::size_t bytes;
  unsigned char tag;
};

constexpr std::size_t marked = 256;  // bytes tagged at each end

void mark(held const& b) {
  std::size_t const n = std::min(b.bytes, marked);
  std::memset(b.p, b.tag, n);
  std::memset(b.p + b.bytes - n, b.tag, n);
}

bool intact(held const& b) {
  std::size_t const n = std::min(b.bytes, marked);
  auto const same = [&](unsigned char const* q) {
    return std::all_of(q, q + n, [&](unsigned char v) { return v == b.tag; });
  };
  return same(b.p) && same(b.p + b.bytes - n);
}

// Growths joining, blocks across seams, and the free ends given back while eight
// threads allocate and free (stream-ordered on shared and per-thread streams, and
// synchronously as cudaMalloc in safe mode): no block is handed out twice, every
// piece goes back once.
TEST(PoolContiguousGrowth, EightThreadsAndReleasesNeverShareABlock) {
  test::arena_test_resource arena{std::size_t{4} << 30};
  arena.contiguous(2 * MiB);
  pool_memory_resource pool{&arena, opts(0)};
  std::atomic<long> corrupt{0};
  std::atomic<int> running{8};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      bool const sync = t % 3 == 2;
      std::optional<scoped_synchronous_call> as_cuda_malloc;
      if (sync) as_cuda_malloc.emplace();
      stream_ref const s{reinterpret_cast<cudaStream_t>(t % 2 == 0 ? legacy_stream_handle : per_thread_stream_handle)};
      std::mt19937 rng{static_cast<unsigned>(77 + t)};
      std::uniform_int_distribution<std::size_t> size{256, 3 * MiB};
      std::vector<held> live;
      unsigned char tag = static_cast<unsigned char>(t * 32);
      for (int i = 0; i < 1500; ++i) {
        if (live.size() < 48 && (live.empty() || rng() % 3 != 0)) {
          std::size_t const n = size(rng);
          held const b{static_cast<unsigned char*>(pool.allocate(n, s)), n, ++tag};
          mark(b);
          live.push_back(b);
        } else {
          std::size_t const k = rng() % live.size();
          if (!intact(live[k])) corrupt.fetch_add(1);
          pool.deallocate(live[k].p, live[k].bytes, s);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (auto const& b : live) {
        if (!intact(b)) corrupt.fetch_add(1);
        pool.deallocate(b.p, b.bytes, s);
      }
      running.fetch_sub(1);
    });
  }
  std::size_t released = 0;
  std::thread releaser{[&] {
    while (running.load() > 0) {
      released += pool.release();
      std::this_thread::sleep_for(std::chrono::microseconds{100});
    }
  }};
  for (auto& th : threads) th.join();
  releaser.join();
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(pool.info().used_bytes, 0U);
  pool.release();
  EXPECT_EQ(pool.pool_size(), 0U);
  EXPECT_EQ(arena.live_bytes(), 0U);
  EXPECT_EQ(arena.bad_frees(), 0U);
  RecordProperty("released_while_running", std::to_string(released));
}

// The free block at the end joins a growth only when that maps fewer granules: a
// 4 MiB request behind 1 MiB free would span three granules from there, and two from
// the new memory's start, where it goes; the 1 MiB stays free for smaller requests.
TEST(PoolContiguousGrowth, ATailThatSavesNoGranuleStaysForSmallerRequests) {
  test::arena_test_resource arena{256 * MiB};
  arena.contiguous(2 * MiB);
  pool_memory_resource pool{&arena, opts(0)};
  void* a = pool.allocate(3 * MiB);  // 4 MiB mapped, 1 MiB free at the end
  void* b = pool.allocate(4 * MiB);
  EXPECT_EQ(as_char(b), as_char(a) + 4 * MiB);  // on a granule boundary
  EXPECT_EQ(pool.pool_size(), 8 * MiB);
  EXPECT_EQ(sizes_of(arena.allocations()), (std::vector<std::size_t>{4 * MiB, 4 * MiB}));
  void* c = pool.allocate(MiB);  // the tail serves it: no growth
  EXPECT_EQ(as_char(c), as_char(a) + 3 * MiB);
  EXPECT_EQ(pool.pool_size(), 8 * MiB);
  pool.deallocate(c, MiB);
  pool.deallocate(b, 4 * MiB);
  pool.deallocate(a, 3 * MiB);
  EXPECT_EQ(pool.info().largest_free_block, 8 * MiB);  // the pieces coalesce across the seam
  EXPECT_EQ(pool.release(), 8 * MiB);
  EXPECT_EQ(arena.bad_frees(), 0U);
}

// The same for a stream-ordered request and for one whose growth leaves memory over:
// the rest of the new memory is free after the request, the old tail before it.
TEST(PoolContiguousGrowth, TheRestOfAGrowthServedAtItsStartStaysFree) {
  test::arena_test_resource arena{256 * MiB};
  arena.contiguous(2 * MiB);
  pool_memory_resource pool{&arena, opts(0)};
  void* a = pool.allocate(3 * MiB / 2, stream_ref{});  // 2 MiB mapped, 512 KiB free
  void* b = pool.allocate(3 * MiB, stream_ref{});      // 4 MiB either way: from the new start
  EXPECT_EQ(as_char(b), as_char(a) + 2 * MiB);
  EXPECT_EQ(pool.pool_size(), 6 * MiB);
  auto const i = pool.info();
  EXPECT_EQ(i.free_bytes, 3 * MiB / 2);
  EXPECT_EQ(i.largest_free_block, MiB);
  void* c = pool.allocate(MiB, stream_ref{});  // the rest of the growth, after b
  EXPECT_EQ(as_char(c), as_char(b) + 3 * MiB);
  EXPECT_EQ(pool.pool_size(), 6 * MiB);
  pool.deallocate(c, MiB, stream_ref{});
  pool.deallocate(b, 3 * MiB, stream_ref{});
  pool.deallocate(a, 3 * MiB / 2, stream_ref{});
  EXPECT_EQ(pool.info().largest_free_block, 6 * MiB);
}

}  // namespace
}  // namespace gpumem
