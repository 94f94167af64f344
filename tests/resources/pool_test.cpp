// pool_memory_resource: growth, maximum, release, coalescing, best fit, OOM
// recovery, concurrency (over a host arena), and stream ordering on the
// simulated device (events, waits, capture, destroyed streams).

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/real_dlsym.hpp>
#include <gpumem/pool_memory_resource.hpp>
#include "pool/coalescing_free_list.hpp"

#include <support/arena_test_resource.hpp>
#include <support/sim_control.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

pool_options opts(std::size_t initial, std::optional<std::size_t> maximum = {}, std::size_t min_growth = MiB) {
  return pool_options{initial, maximum, min_growth};
}

std::vector<std::size_t> sizes_of(std::vector<test::arena_test_resource::call> const& calls) {
  std::vector<std::size_t> out;
  for (auto const& c : calls) out.push_back(c.bytes);
  return out;
}

char* as_char(void* p) { return static_cast<char*>(p); }

// ---- the free list alone -------------------------------------------------------

// A list moved away keeps nothing: a destroyed stream's list moves into a foreign
// batch, and a reclaim that still holds the stream's entry must find it empty. The
// implicit move copied the recent frees' slots, so the moved-from list still held
// (and would hand out again) the blocks it had given away.
TEST(CoalescingFreeList, AMovedFromListHoldsNothing) {
  alignas(256) static char mem[8192];
  detail::coalescing_free_list a;
  ASSERT_TRUE(a.insert({mem, 1024, mem}));  // a recent free: kept in a quick slot
  a.add({mem + 4096, 2048, mem});           // into the tree
  detail::coalescing_free_list b{std::move(a)};
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): what a move leaves is the point
  EXPECT_EQ(a.total_bytes(), 0U);
  EXPECT_FALSE(a.take_best_fit(1024));
  EXPECT_EQ(b.total_bytes(), 3072U);
  detail::coalescing_free_list c;
  c = std::move(b);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.total_bytes(), 0U);
  EXPECT_EQ(c.total_bytes(), 3072U);
  EXPECT_EQ(c.take_best_fit(1024).ptr, mem);
  EXPECT_EQ(c.take_best_fit(2048).ptr, mem + 4096);
  EXPECT_TRUE(c.empty());
}

TEST(CoalescingFreeList, MergesNeighboursOfOneSlabOnly) {
  // Room past slab 2, so the refused block running off its end stays inside the array.
  alignas(256) static char mem[8192 + 512];
  char* const s1 = mem;         // slab 1: [0, 4096)
  char* const s2 = mem + 4096;  // slab 2: [4096, 8192), adjacent to slab 1
  detail::coalescing_free_list l;
  EXPECT_TRUE(l.insert({s1, 1024, s1}));
  EXPECT_TRUE(l.insert({s1 + 2048, 2048, s1}));
  EXPECT_TRUE(l.insert({s1 + 1024, 1024, s1}));  // fills the gap: one block of 4096
  EXPECT_EQ(l.block_count(), 1U);
  EXPECT_EQ(l.largest(), 4096U);
  EXPECT_TRUE(l.insert({s2, 4096, s2}));  // adjacent, other slab: stays apart
  EXPECT_EQ(l.block_count(), 2U);
  EXPECT_EQ(l.total_bytes(), 8192U);
  EXPECT_FALSE(l.insert({s1 + 256, 256, s1}));  // overlaps a free block: refused
  EXPECT_FALSE(l.insert({s2 + 3840, 512, s2}));
  EXPECT_EQ(l.total_bytes(), 8192U);
}

TEST(CoalescingFreeList, BestFitSplitsAndPrefersLowAddresses) {
  alignas(256) static char mem[16384];
  detail::coalescing_free_list l;
  ASSERT_TRUE(l.insert({mem, 2048, mem}));
  ASSERT_TRUE(l.insert({mem + 4096, 1024, mem}));
  ASSERT_TRUE(l.insert({mem + 8192, 1024, mem}));
  auto b = l.take_best_fit(768);
  ASSERT_TRUE(b);
  EXPECT_EQ(b.ptr, mem + 4096);  // the tightest (1024), lower of the two
  EXPECT_EQ(b.size, 768U);
  EXPECT_EQ(l.total_bytes(), 2048U + 256U + 1024U);
  EXPECT_FALSE(l.take_best_fit(4096));
  EXPECT_TRUE(l.remove(mem + 4096 + 768));  // the split's rest is a block of its own
  EXPECT_FALSE(l.remove(mem + 4096));
}

// A split's rest keeps its node in the size index when no block sorts between its
// new and old sizes, and moves otherwise: either way best fit still finds it.
TEST(CoalescingFreeList, TheRestOfASplitKeepsItsPlaceInSizeOrderOrMoves) {
  alignas(256) static char mem[16384];
  detail::coalescing_free_list l;
  ASSERT_TRUE(l.insert({mem, 4096, mem}));
  ASSERT_TRUE(l.insert({mem + 8192, 1024, mem}));
  // 4096 -> rest 2048: still above the 1024 block (kept in place).
  ASSERT_EQ(l.take_best_fit(2048).ptr, mem);
  EXPECT_EQ(l.largest(), 2048U);
  // 2048 -> rest 512: now below the 1024 block (moved).
  ASSERT_EQ(l.take_best_fit(1536).ptr, mem + 2048);
  EXPECT_EQ(l.largest(), 1024U);
  EXPECT_EQ(l.take_best_fit(768).ptr, mem + 8192);  // the tightest fit is the 1024 block
  EXPECT_EQ(l.take_best_fit(512).ptr, mem + 3584);  // the 512 rest, found by its new size
  EXPECT_EQ(l.take_best_fit(256).ptr, mem + 8192 + 768);
  EXPECT_TRUE(l.empty());
  EXPECT_EQ(l.total_bytes(), 0U);
}

// The list skips the overlap checks when the block filed is the one it handed out
// last (nothing filed since): every other filing must still refuse a double free.
TEST(CoalescingFreeList, TheBlockHandedOutLastGoesBackAndADoubleFreeIsStillRefused) {
  alignas(256) static char mem[8192];
  detail::coalescing_free_list l;
  ASSERT_TRUE(l.insert({mem, 8192, mem}));
  auto const a = l.take_best_fit(1024);
  ASSERT_EQ(a.ptr, mem);
  EXPECT_TRUE(l.insert(a));   // handed out last: back without a check
  EXPECT_FALSE(l.insert(a));  // the same block again: a double free
  EXPECT_EQ(l.total_bytes(), 8192U);

  // A filing after the take ends the proof: the block, made free by it, is refused.
  auto const b = l.take_best_fit(1024);
  ASSERT_EQ(b.ptr, mem);
  l.add(b);                   // a double free arriving in a batch
  EXPECT_FALSE(l.insert(b));  // must not be filed twice
  EXPECT_EQ(l.total_bytes(), 8192U);

  auto const c = l.take_best_fit(1024);
  ASSERT_EQ(c.ptr, mem);
  detail::coalescing_free_list other;
  ASSERT_TRUE(other.insert(c));  // freed on another stream, gathered here
  l.merge_from(std::move(other));
  EXPECT_FALSE(l.insert(c));
  EXPECT_FALSE(l.reissue(c));  // nor handed out again while free
  EXPECT_EQ(l.total_bytes(), 8192U);

  // reissue: a block freed but never filed (a deferred free) is handed out again
  // at once, and then counts as handed out last.
  auto const d = l.take_best_fit(2048);
  ASSERT_TRUE(d);
  EXPECT_TRUE(l.reissue(d));
  EXPECT_TRUE(l.insert(d));
  EXPECT_FALSE(l.insert(d));
  EXPECT_EQ(l.total_bytes(), 8192U);
  EXPECT_EQ(l.block_count(), 1U);
}

TEST(CoalescingFreeList, ShareIntoKeepsTheFrontOfASingleBlock) {
  auto* base = reinterpret_cast<char*>(std::uintptr_t{1} << 30);
  detail::coalescing_free_list from;
  detail::coalescing_free_list to;
  // One block, the request at most half of it: the back half moves, the front stays.
  ASSERT_TRUE(from.insert({base, 64 * KiB, base}));
  from.share_into(to, KiB);
  EXPECT_EQ(from.total_bytes(), 32 * KiB);
  EXPECT_EQ(to.total_bytes(), 32 * KiB);
  EXPECT_EQ(from.take_best_fit(32 * KiB).ptr, base);
  EXPECT_EQ(to.take_best_fit(32 * KiB).ptr, base + 32 * KiB);

  // More than one block: everything moves (cutting there fragments the pool).
  ASSERT_TRUE(from.insert({base, 4 * KiB, base}));
  ASSERT_TRUE(from.insert({base + 8 * KiB, 64 * KiB, base}));
  from.share_into(to, KiB);
  EXPECT_TRUE(from.empty());
  EXPECT_EQ(to.total_bytes(), 68 * KiB);
  EXPECT_EQ(to.take_best_fit(64 * KiB).ptr, base + 8 * KiB);
  EXPECT_EQ(to.take_best_fit(4 * KiB).ptr, base);

  // A request the back half cannot serve takes everything; halves are cut at 256 B.
  ASSERT_TRUE(from.insert({base, 1280, base}));
  from.share_into(to, 768);
  EXPECT_TRUE(from.empty());
  EXPECT_EQ(to.take_best_fit(1280).ptr, base);
  ASSERT_TRUE(from.insert({base, 1280, base}));
  from.share_into(to, 512);
  EXPECT_EQ(from.total_bytes(), 768U);  // the back half: 512, a multiple of 256
  EXPECT_EQ(to.take_best_fit(512).ptr, base + 768);
  ASSERT_EQ(from.take_best_fit(768).ptr, base);

  // A large block keeps most of itself: the taker gets share_cap, or its request.
  std::size_t const cap = detail::coalescing_free_list::share_cap;
  ASSERT_TRUE(from.insert({base + MiB, 64 * cap, base}));
  from.share_into(to, MiB);
  EXPECT_EQ(to.total_bytes(), cap);
  EXPECT_EQ(to.take_best_fit(cap).ptr, base + MiB + 63 * cap);
  // A request past share_max_request takes the whole block (large requests are
  // rare enough that the event they cost does not matter).
  from.share_into(to, 2 * detail::coalescing_free_list::share_max_request);
  EXPECT_TRUE(from.empty());
  EXPECT_EQ(to.take_best_fit(63 * cap).ptr, base + MiB);
}

// A reclaim's batch (add_all) is filed when the list is next used, by whoever uses
// it. Until then its blocks are free all the same: a block in it is never handed
// out again unchecked (reissue), a double free in it is dropped when it is filed,
// and every query sees the batch filed and coalesced.
TEST(CoalescingFreeList, ABatchIsFiledAtTheNextUseAndCountsAsFreeUntilThen) {
  alignas(256) static char slab[8 * 256];
  detail::coalescing_free_list list;
  list.add({slab, 8 * 256, slab});
  auto const b = list.take_best_fit(256);  // the block handed out last
  ASSERT_EQ(b.ptr, slab);
  list.add_all({{slab, 256, slab}});  // freed elsewhere, reclaimed into this list
  EXPECT_FALSE(list.reissue(b));      // free again (in the batch): not handed out twice
  EXPECT_FALSE(list.empty());
  list.add_all({{slab, 256, slab}});  // the same block again: a double free
  EXPECT_EQ(list.total_bytes(), 8 * 256U);
  EXPECT_EQ(list.largest(), 8 * 256U);                 // filed: the block joined the rest
  EXPECT_FALSE(list.insert({slab + 256, 256, slab}));  // the checks see filed blocks
  EXPECT_EQ(list.take_exact(8 * 256).ptr, slab);
  EXPECT_TRUE(list.empty());
}

TEST(CoalescingFreeList, MergeAndRemoveRegions) {
  alignas(256) static char mem[8192];
  detail::coalescing_free_list a;
  detail::coalescing_free_list b;
  ASSERT_TRUE(a.insert({mem, 1024, mem}));
  ASSERT_TRUE(b.insert({mem + 1024, 1024, mem}));
  ASSERT_TRUE(b.insert({mem + 4096, 4096, mem + 4096}));
  a.merge_from(std::move(b));
  EXPECT_TRUE(b.empty());          // NOLINT(bugprone-use-after-move): merge_from leaves its source empty
  EXPECT_EQ(a.block_count(), 2U);  // [0, 2048) coalesced, and the second slab
  EXPECT_EQ(a.largest(), 4096U);
  struct region {
    char* base;
    std::size_t size;
  };
  a.remove_regions(std::vector<region>{{mem + 4096, 4096}});
  EXPECT_EQ(a.block_count(), 1U);
  EXPECT_EQ(a.total_bytes(), 2048U);
}

// ---- construction and sizing ----------------------------------------------------

TEST(Pool, NullUpstreamAndBadOptionsThrow) {
  EXPECT_THROW(pool_memory_resource(nullptr, opts(0)), logic_error);
  test::arena_test_resource arena{8 * MiB};
  EXPECT_THROW(pool_memory_resource(&arena, opts(4 * MiB, 2 * MiB)), logic_error);
  EXPECT_TRUE(arena.allocations().empty());
}

TEST(Pool, InitialSizeIsReservedOnce) {
  test::arena_test_resource arena{16 * MiB};
  pool_memory_resource pool{&arena, opts(4 * MiB)};
  EXPECT_EQ(pool.pool_size(), 4 * MiB);
  EXPECT_EQ(sizes_of(arena.allocations()), std::vector<std::size_t>{4 * MiB});
  auto const i = pool.info();
  EXPECT_EQ(i.reserved_bytes, 4 * MiB);
  EXPECT_EQ(i.used_bytes, 0U);
  EXPECT_EQ(i.free_bytes, 4 * MiB);
  EXPECT_EQ(i.largest_free_block, 4 * MiB);

  std::vector<void*> ps;
  for (int k = 0; k < 4; ++k) ps.push_back(pool.allocate(MiB));
  EXPECT_EQ(arena.allocations().size(), 1U);  // served from the initial slab
  EXPECT_EQ(pool.info().used_bytes, 4 * MiB);
  for (auto* p : ps) pool.deallocate(p, MiB);
}

TEST(Pool, ZeroAndNull) {
  test::arena_test_resource arena{4 * MiB};
  pool_memory_resource pool{&arena, opts(MiB)};
  EXPECT_EQ(pool.allocate(0), nullptr);
  pool.deallocate(nullptr, 0);
  pool.deallocate(nullptr, 100);
  EXPECT_EQ(pool.info().used_bytes, 0U);
}

TEST(Pool, SizesRoundTo256AndPointersAreAligned) {
  test::arena_test_resource arena{4 * MiB};
  pool_memory_resource pool{&arena, opts(MiB)};
  void* a = pool.allocate(1);
  void* b = pool.allocate(257);
  void* c = pool.allocate(256);
  EXPECT_EQ(as_char(b) - as_char(a), 256);
  EXPECT_EQ(as_char(c) - as_char(b), 512);
  for (void* p : {a, b, c}) EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0U);
  EXPECT_EQ(pool.info().used_bytes, 256U + 512U + 256U);
  pool.deallocate(a, 1);
  pool.deallocate(b, 257);
  pool.deallocate(c, 256);
  EXPECT_EQ(pool.info().largest_free_block, MiB);
}

TEST(Pool, GrowthStepsFollowTheRequestAndThePool) {
  test::arena_test_resource arena{256 * MiB};
  pool_memory_resource pool{&arena, opts(0)};
  EXPECT_EQ(pool.pool_size(), 0U);
  EXPECT_TRUE(arena.allocations().empty());

  void* a = pool.allocate(1000);  // min_growth
  EXPECT_EQ(pool.pool_size(), 1 * MiB);
  void* b = pool.allocate(MiB);  // the request (= min_growth; 1/16 of the pool is less)
  EXPECT_EQ(pool.pool_size(), 2 * MiB);
  void* c = pool.allocate(3 * MiB);  // the request
  EXPECT_EQ(pool.pool_size(), 5 * MiB);
  void* d = pool.allocate(4 * MiB);  // the request: never blind doubling
  EXPECT_EQ(pool.pool_size(), 9 * MiB);
  void* e = pool.allocate(KiB);  // tightest fit: the first slab's rest
  EXPECT_EQ(as_char(e), as_char(a) + 1024);
  EXPECT_EQ(pool.pool_size(), 9 * MiB);
  EXPECT_EQ(sizes_of(arena.allocations()), (std::vector<std::size_t>{MiB, MiB, 3 * MiB, 4 * MiB}));

  auto const i = pool.info();
  std::size_t const used = 1024 + MiB + 3 * MiB + 4 * MiB + 1024;
  EXPECT_EQ(i.used_bytes, used);
  EXPECT_EQ(i.free_bytes, 9 * MiB - used);
  EXPECT_EQ(i.largest_free_block, MiB - 2 * KiB);  // the rest of the first slab
  void* f = pool.allocate(64 * MiB);               // the request: larger than 1/64 of the pool
  EXPECT_EQ(pool.pool_size(), 73 * MiB);
  void* g = pool.allocate(MiB);  // 1/64 of a 73 MiB pool, rounded to 256: more than the request
  EXPECT_EQ(pool.pool_size(), 73 * MiB + ((73 * MiB / 64) & ~std::size_t{255}));
  // 1/64 of a large pool is capped: a 4 GiB pool grows by 32 MiB for a small request.
  test::arena_test_resource big_arena{8ULL << 30};
  pool_memory_resource big{&big_arena, opts(0)};
  void* h = big.allocate(4ULL << 30);
  void* small = big.allocate(KiB);
  EXPECT_EQ(big.pool_size(), (4ULL << 30) + 32 * MiB);
  big.deallocate(small, KiB);
  big.deallocate(h, 4ULL << 30);
  for (auto [p, n] :
       {std::pair{a, std::size_t{1000}}, {b, MiB}, {c, 3 * MiB}, {d, 4 * MiB}, {e, KiB}, {f, 64 * MiB}, {g, MiB}}) {
    pool.deallocate(p, n);
  }
  EXPECT_EQ(pool.info().used_bytes, 0U);
  EXPECT_EQ(pool.info().largest_free_block, 64 * MiB);
}

TEST(Pool, MaximumIsHonoured) {
  test::arena_test_resource arena{64 * MiB};
  pool_memory_resource pool{&arena, opts(0, 4 * MiB)};
  EXPECT_THROW(static_cast<void>(pool.allocate(4 * MiB + 1)), out_of_memory);
  EXPECT_TRUE(arena.allocations().empty());  // refused at once

  void* a = pool.allocate(3 * MiB);
  void* b = pool.allocate(KiB);  // wants max(1 MiB, 3 MiB): clamped to the 1 MiB left
  EXPECT_EQ(sizes_of(arena.allocations()), (std::vector<std::size_t>{3 * MiB, MiB}));
  void* c = pool.allocate(MiB - KiB);  // exactly the rest
  EXPECT_EQ(pool.pool_size(), 4 * MiB);
  try {
    static_cast<void>(pool.allocate(256));
    ADD_FAILURE() << "expected out_of_memory";
  } catch (out_of_memory const& e) {
    EXPECT_EQ(e.code(), CUDA_ERROR_OUT_OF_MEMORY);
    std::string const msg = e.what();
    EXPECT_NE(msg.find("requested 256 B"), std::string::npos) << msg;
    EXPECT_NE(msg.find("reserved 4194304 B"), std::string::npos) << msg;
    EXPECT_NE(msg.find("maximum 4194304 B"), std::string::npos) << msg;
  }
  EXPECT_EQ(arena.allocations().size(), 2U);
  pool.deallocate(a, 3 * MiB);
  pool.deallocate(b, KiB);
  pool.deallocate(c, MiB - KiB);
}

// ---- release ---------------------------------------------------------------------

TEST(Pool, ReleaseReturnsExactlyTheFreeSlabs) {
  test::arena_test_resource arena{64 * MiB};
  pool_memory_resource pool{&arena, opts(0)};
  void* a = pool.allocate(MiB);      // slab 1: 1 MiB
  void* b = pool.allocate(MiB);      // slab 2: 1 MiB, adjacent in the arena
  void* c = pool.allocate(2 * MiB);  // slab 3: 2 MiB
  ASSERT_EQ(as_char(b), as_char(a) + MiB);
  pool.deallocate(a, MiB);
  pool.deallocate(b, MiB);
  // Adjacent, but of two slabs: they must not coalesce.
  EXPECT_EQ(pool.info().free_bytes, 2 * MiB);
  EXPECT_EQ(pool.info().largest_free_block, MiB);

  EXPECT_EQ(pool.release(), 2 * MiB);
  EXPECT_EQ(pool.pool_size(), 2 * MiB);
  auto const frees = arena.deallocations();
  ASSERT_EQ(frees.size(), 2U);
  std::vector<void*> freed{frees[0].ptr, frees[1].ptr};
  std::sort(freed.begin(), freed.end());
  EXPECT_EQ(freed, (std::vector<void*>{a, b}));
  EXPECT_EQ(frees[0].bytes, MiB);
  EXPECT_EQ(frees[1].bytes, MiB);
  EXPECT_EQ(pool.release(), 0U);  // c is in use

  std::memset(c, 0x5a, 2 * MiB);  // still ours
  pool.deallocate(c, 2 * MiB);
  EXPECT_EQ(pool.release(), 2 * MiB);
  EXPECT_EQ(pool.pool_size(), 0U);
  EXPECT_EQ(arena.live_bytes(), 0U);
  EXPECT_EQ(arena.bad_frees(), 0U);
  auto const i = pool.info();
  EXPECT_EQ(i.reserved_bytes, 0U);
  EXPECT_EQ(i.free_bytes, 0U);
}

TEST(Pool, FreesFindANewSlabAtAReleasedSlabsAddress) {
  test::arena_test_resource arena{8 * MiB};
  pool_memory_resource pool{&arena, opts(0)};
  void* a = pool.allocate(MiB);
  pool.deallocate(a, MiB);  // this thread now knows a's slab: [a, a + 1 MiB)
  EXPECT_EQ(pool.release(), MiB);
  void* b = pool.allocate(2 * MiB);  // a new, larger slab at the same address
  ASSERT_EQ(b, a);
  pool.deallocate(b, 2 * MiB);  // must not be judged against the old slab's size
  auto const i = pool.info();
  EXPECT_EQ(i.used_bytes, 0U);
  EXPECT_EQ(i.largest_free_block, 2 * MiB);
}

TEST(Pool, ReleaseKeepsPartlyUsedSlabs) {
  test::arena_test_resource arena{8 * MiB};
  pool_memory_resource pool{&arena, opts(2 * MiB)};
  void* a = pool.allocate(256);
  EXPECT_EQ(pool.release(), 0U);
  EXPECT_EQ(pool.pool_size(), 2 * MiB);
  pool.deallocate(a, 256);
  EXPECT_EQ(pool.release(), 2 * MiB);
}

TEST(Pool, DestructorReturnsEverySlab) {
  test::arena_test_resource arena{8 * MiB};
  {
    pool_memory_resource pool{&arena, opts(MiB)};
    static_cast<void>(pool.allocate(MiB));  // still in use at destruction
    static_cast<void>(pool.allocate(2 * MiB));
    EXPECT_EQ(arena.live_bytes(), 3 * MiB);
  }
  EXPECT_EQ(arena.live_bytes(), 0U);
  EXPECT_EQ(arena.bad_frees(), 0U);
}

// ---- coalescing, best fit, fragmentation -------------------------------------------

TEST(Pool, FreedNeighboursCoalesce) {
  test::arena_test_resource arena{4 * MiB};
  pool_memory_resource pool{&arena, opts(MiB)};
  void* a = pool.allocate(256 * KiB);
  void* b = pool.allocate(256 * KiB);
  void* c = pool.allocate(256 * KiB);
  ASSERT_EQ(as_char(b), as_char(a) + 256 * KiB);
  ASSERT_EQ(as_char(c), as_char(b) + 256 * KiB);

  pool.deallocate(a, 256 * KiB);  // free: a (256 KiB), tail (256 KiB)
  auto i = pool.info();
  EXPECT_EQ(i.free_bytes, 512 * KiB);
  EXPECT_EQ(i.largest_free_block, 256 * KiB);
  EXPECT_DOUBLE_EQ(i.fragmentation(), 0.5);

  pool.deallocate(c, 256 * KiB);  // c joins the tail: 512 KiB
  i = pool.info();
  EXPECT_EQ(i.free_bytes, 768 * KiB);
  EXPECT_EQ(i.largest_free_block, 512 * KiB);
  EXPECT_DOUBLE_EQ(i.fragmentation(), 1.0 / 3.0);

  pool.deallocate(b, 256 * KiB);  // a + b + c + tail: the whole slab
  i = pool.info();
  EXPECT_EQ(i.free_bytes, MiB);
  EXPECT_EQ(i.largest_free_block, MiB);
  EXPECT_DOUBLE_EQ(i.fragmentation(), 0.0);
  EXPECT_EQ(pool.allocate(MiB), a);  // one block again
  pool.deallocate(a, MiB);
}

TEST(Pool, BestFitTakesTheTightestBlock) {
  test::arena_test_resource arena{4 * MiB};
  pool_memory_resource pool{&arena, opts(MiB)};
  void* h64 = pool.allocate(64 * KiB);
  void* s0 = pool.allocate(256);
  void* h16 = pool.allocate(16 * KiB);
  void* s1 = pool.allocate(256);
  void* h32 = pool.allocate(32 * KiB);
  void* s2 = pool.allocate(256);
  pool.deallocate(h64, 64 * KiB);
  pool.deallocate(h16, 16 * KiB);
  pool.deallocate(h32, 32 * KiB);

  EXPECT_EQ(pool.allocate(16 * KiB), h16);
  EXPECT_EQ(pool.allocate(20 * KiB), h32);
  EXPECT_EQ(pool.allocate(40 * KiB), h64);
  void* tail = pool.allocate(65 * KiB);
  EXPECT_EQ(as_char(tail), as_char(s2) + 256);
  // The 12 KiB and 24 KiB leftovers of the split holes are free blocks now.
  EXPECT_EQ(pool.allocate(12 * KiB), as_char(h32) + 20 * KiB);
  EXPECT_EQ(pool.allocate(24 * KiB), as_char(h64) + 40 * KiB);
  EXPECT_EQ(arena.allocations().size(), 1U);
  static_cast<void>(s0);
  static_cast<void>(s1);
}

TEST(Pool, DoubleFreesAreIgnored) {
  test::arena_test_resource arena{4 * MiB};
  pool_memory_resource pool{&arena, opts(MiB)};
  void* a = pool.allocate(4 * KiB);
  void* b = pool.allocate(4 * KiB);
  pool.deallocate(a, 4 * KiB);
  pool.deallocate(a, 4 * KiB);                 // double free: must not make `a` free twice
  EXPECT_EQ(pool.info().used_bytes, 4 * KiB);  // b is still in use
  void* c = pool.allocate(4 * KiB);
  void* d = pool.allocate(4 * KiB);
  EXPECT_EQ(c, a);
  EXPECT_NE(d, a);
  EXPECT_NE(d, b);
  pool.deallocate(b, 4 * KiB);
  pool.deallocate(c, 4 * KiB);
  pool.deallocate(d, 4 * KiB);
  EXPECT_EQ(pool.info().largest_free_block, MiB);
}

// A foreign pointer or a wrong size is the caller's bug: a release build ignores it,
// keeping the pool consistent; a debug build stops there (PoolDeathTest).
#ifdef NDEBUG
TEST(Pool, ForeignFreesAndWrongSizesAreIgnoredInReleaseBuilds) {
  test::arena_test_resource arena{4 * MiB};
  pool_memory_resource pool{&arena, opts(MiB)};
  void* b = pool.allocate(4 * KiB);
  int on_stack = 0;
  pool.deallocate(&on_stack, sizeof on_stack);  // not ours
  pool.deallocate(as_char(b), 2 * MiB);         // runs past the slab: wrong size
  pool.deallocate(as_char(b), 0);               // a size the pool never hands out
  EXPECT_EQ(pool.info().used_bytes, 4 * KiB);   // b is still in use
  EXPECT_NE(pool.allocate(4 * KiB), b);
  pool.deallocate(b, 4 * KiB);
}
#else
TEST(Pool, ForeignFreesAndWrongSizesAreIgnoredInReleaseBuilds) {
  GTEST_SKIP() << "assertions are on (no NDEBUG): PoolDeathTest checks that they abort";
}
#endif

#ifndef NDEBUG
class PoolDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(PoolDeathTest, AForeignPointerAborts) {
  test::arena_test_resource arena{4 * MiB};
  pool_memory_resource pool{&arena, opts(MiB)};
  int on_stack = 0;
  EXPECT_DEATH(pool.deallocate(&on_stack, sizeof on_stack), "pool: deallocate of a pointer the pool does not hold");
}

TEST_F(PoolDeathTest, ASizeRunningPastTheRegionAborts) {
  test::arena_test_resource arena{4 * MiB};
  pool_memory_resource pool{&arena, opts(MiB)};
  void* b = pool.allocate(4 * KiB);
  EXPECT_DEATH(pool.deallocate(b, 2 * MiB), "pool: deallocate with a size that runs past");
  EXPECT_DEATH(pool.deallocate(b, 0), "pool: deallocate with a size the pool never hands out");
  pool.deallocate(b, 4 * KiB);  // the right size: no abort
  EXPECT_EQ(pool.info().used_bytes, 0U);
}
#else
TEST(PoolDeathTest, ChecksNeedAssertions) { GTEST_SKIP() << "GPUMEM_ASSERT is compiled out (NDEBUG)"; }
#endif

// ---- upstream out of memory ----------------------------------------------------------

TEST(Pool, UpstreamOomTrimsAndRetries) {
  test::arena_test_resource arena{3 * MiB};
  pool_memory_resource pool{&arena, opts(0)};
  void* a = pool.allocate(MiB);  // slab [0, 1) MiB
  void* b = pool.allocate(MiB);  // slab [1, 2) MiB
  pool.deallocate(b, MiB);
  // Wants a 2 MiB slab; the arena has only [2, 3) MiB left until the free slab
  // goes back, which joins it into [1, 3) MiB.
  void* c = pool.allocate(2 * MiB);
  EXPECT_EQ(c, b);
  EXPECT_EQ(pool.pool_size(), 3 * MiB);
  auto const frees = arena.deallocations();
  ASSERT_EQ(frees.size(), 1U);
  EXPECT_EQ(frees[0].ptr, b);
  EXPECT_EQ(frees[0].bytes, MiB);
  EXPECT_GE(arena.failed_allocations(), 1U);

  // Nothing left anywhere: a clean out_of_memory that says what the pool holds.
  try {
    static_cast<void>(pool.allocate(512 * KiB));
    ADD_FAILURE() << "expected out_of_memory";
  } catch (out_of_memory const& e) {
    std::string const msg = e.what();
    EXPECT_NE(msg.find("requested 524288 B"), std::string::npos) << msg;
    EXPECT_NE(msg.find("reserved 3145728 B"), std::string::npos) << msg;
    EXPECT_NE(msg.find("free 0 B"), std::string::npos) << msg;
    EXPECT_NE(msg.find("largest free block 0 B"), std::string::npos) << msg;
  }
  EXPECT_EQ(pool.pool_size(), 3 * MiB);
  EXPECT_EQ(pool.info().used_bytes, 3 * MiB);
  pool.deallocate(a, MiB);
  pool.deallocate(c, 2 * MiB);
}

TEST(Pool, GeometricStepFallsBackToTheRequest) {
  test::arena_test_resource arena{6 * MiB};
  pool_memory_resource pool{&arena, opts(0)};
  void* a = pool.allocate(4 * MiB);  // slab of 4 MiB
  void* b = pool.allocate(MiB);      // wants 4 MiB (geometric), gets the 1 MiB min_growth step
  EXPECT_EQ(sizes_of(arena.allocations()), (std::vector<std::size_t>{4 * MiB, MiB}));
  void* c = pool.allocate(512 * KiB);  // wants 5 MiB, then 1 MiB: fits
  EXPECT_EQ(pool.pool_size(), 6 * MiB);
  EXPECT_TRUE(arena.deallocations().empty());  // no trim was needed
  pool.deallocate(a, 4 * MiB);
  pool.deallocate(b, MiB);
  pool.deallocate(c, 512 * KiB);
}

// ---- threads --------------------------------------------------------------------------

/// Each live block is filled with its own byte; verified before it is freed.
struct live_block {
  unsigned char* p;
  std::size_t bytes;
  unsigned char tag;
};

bool intact(live_block const& b) {
  return std::all_of(b.p, b.p + b.bytes, [&](unsigned char v) { return v == b.tag; });
}

TEST(Pool, EightThreadsNeverShareABlock) {
  test::arena_test_resource arena{512 * MiB};
  pool_memory_resource pool{&arena, opts(0)};
  std::atomic<long> corrupt{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      // Half the threads share the legacy stream, half use their per-thread stream.
      stream_ref const s{reinterpret_cast<cudaStream_t>(t % 2 == 0 ? legacy_stream_handle : per_thread_stream_handle)};
      std::mt19937 rng{static_cast<unsigned>(1234 + t)};
      std::uniform_int_distribution<std::size_t> size{1, 16 * KiB};
      std::vector<live_block> live;
      unsigned char tag = static_cast<unsigned char>(t * 32);
      for (int i = 0; i < 3000; ++i) {
        if (live.empty() || rng() % 3 != 0) {
          std::size_t const n = size(rng);
          auto* p = static_cast<unsigned char*>(pool.allocate(n, s));
          std::memset(p, ++tag, n);
          live.push_back({p, n, tag});
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
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupt.load(), 0);
  auto const i = pool.info();
  EXPECT_EQ(i.used_bytes, 0U);
  EXPECT_EQ(i.free_bytes, pool.pool_size());
  EXPECT_EQ(arena.bad_frees(), 0U);
}

TEST(Pool, PerThreadDefaultStreamReusesWithinItsThread) {
  test::arena_test_resource arena{16 * MiB};
  pool_memory_resource pool{&arena, opts(0)};
  stream_ref const ptds{reinterpret_cast<cudaStream_t>(per_thread_stream_handle)};
  std::thread other{[&] {
    void* p = pool.allocate(4 * KiB, ptds);
    pool.deallocate(p, 4 * KiB, ptds);
    EXPECT_EQ(pool.allocate(4 * KiB, ptds), p);  // same thread, same stream: at once
    pool.deallocate(p, 4 * KiB, ptds);
  }};
  other.join();
  EXPECT_EQ(arena.allocations().size(), 1U);
}

// ---- deferred frees ------------------------------------------------------------------
// The thread that owns a stream's list (the first to free there, until it exits)
// leaves its latest free in the list's one-block slot without taking the lock; the
// next holder of the lock files it, or the next allocation hands it out again.

TEST(Pool, ADeferredFreeCountsAsFreeAndIsReleased) {
  test::arena_test_resource arena{4 * MiB};
  pool_memory_resource pool{&arena, opts(0)};
  void* p = pool.allocate(MiB);  // the whole first slab
  ASSERT_EQ(pool.pool_size(), MiB);
  pool.deallocate(p, MiB);  // deferred: in the slot, not in the list
  auto const i = pool.info();
  EXPECT_EQ(i.used_bytes, 0U);
  EXPECT_EQ(i.free_bytes, MiB);
  EXPECT_EQ(i.largest_free_block, MiB);
  EXPECT_EQ(pool.release(), MiB);
  EXPECT_EQ(arena.live_bytes(), 0U);
}

TEST(Pool, ADoubleFreeOfADeferredBlockIsRefused) {
  test::arena_test_resource arena{4 * MiB};
  pool_memory_resource pool{&arena, opts(MiB)};
  void* a = pool.allocate(4 * KiB);
  pool.deallocate(a, 4 * KiB);  // deferred
  pool.deallocate(a, 4 * KiB);  // the slot is taken: filed under the lock, and refused
  void* b = pool.allocate(4 * KiB);
  void* c = pool.allocate(4 * KiB);
  EXPECT_EQ(b, a);
  EXPECT_NE(c, a);

  // Deferred while already free in the list: the slot takes it unchecked, so the
  // next allocation checks it before handing it out, and drops it.
  pool.deallocate(b, 4 * KiB);       // deferred
  void* d = pool.allocate(8 * KiB);  // another size: the deferred block is filed
  pool.deallocate(b, 4 * KiB);       // the double free, deferred into the empty slot
  void* e = pool.allocate(4 * KiB);
  void* f = pool.allocate(4 * KiB);
  EXPECT_EQ(e, a);
  EXPECT_NE(f, e);  // not handed out twice
  EXPECT_EQ(pool.info().used_bytes, 20 * KiB);
  for (void* q : {c, e, f}) pool.deallocate(q, 4 * KiB);
  pool.deallocate(d, 8 * KiB);
  EXPECT_EQ(pool.info().used_bytes, 0U);
  EXPECT_EQ(pool.info().largest_free_block, MiB);
}

TEST(Pool, AnotherThreadOnTheStreamTakesADeferredFreeAndFilesItsOwnUnderTheLock) {
  test::arena_test_resource arena{4 * MiB};
  pool_memory_resource pool{&arena, opts(MiB)};
  void* p = pool.allocate(4 * KiB);
  pool.deallocate(p, 4 * KiB);  // this thread owns the legacy stream's list: deferred
  std::thread other{[&] {
    void* q = pool.allocate(4 * KiB);  // the same stream: usable at once
    EXPECT_EQ(q, p);
    pool.deallocate(q, 4 * KiB);  // not the owner: filed under the lock ...
    pool.deallocate(q, 4 * KiB);  // ... where a double free is refused
  }};
  other.join();
  EXPECT_EQ(pool.allocate(4 * KiB), p);
  void* r = pool.allocate(4 * KiB);
  EXPECT_NE(r, p);
  EXPECT_EQ(pool.info().used_bytes, 8 * KiB);
  pool.deallocate(p, 4 * KiB);
  pool.deallocate(r, 4 * KiB);
}

TEST(Pool, ThreadsComingAndGoingOnOneStreamNeverShareABlock) {
  // Each round's threads share the legacy stream; the slot's ownership passes from
  // an exited thread to the next one to free there. info() and release() run all
  // along (for ThreadSanitizer, and release() gives back only slabs free whole: a
  // block it took for free while a thread held it would show as corrupted tags or
  // as the arena's bad frees).
  test::arena_test_resource arena{256 * MiB};
  pool_memory_resource pool{&arena, opts(0)};
  std::atomic<long> corrupt{0};
  std::atomic<bool> done{false};
  std::thread observer{[&] {
    while (!done.load()) {
      static_cast<void>(pool.info());
      static_cast<void>(pool.release());
    }
  }};
  for (int round = 0; round < 6; ++round) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, round, t] {
        std::mt19937 rng{static_cast<unsigned>(round * 16 + t)};
        constexpr std::size_t sizes[] = {256, 4 * KiB, 64 * KiB};
        std::vector<live_block> live;
        auto tag = static_cast<unsigned char>(t * 64);
        for (int i = 0; i < 2000; ++i) {
          if (live.size() < 2 || rng() % 2 == 0) {
            std::size_t const n = sizes[rng() % 3];
            auto* p = static_cast<unsigned char*>(pool.allocate(n));
            std::memset(p, ++tag, n);
            live.push_back({p, n, tag});
          } else {
            // Mostly the newest (a free the next allocation may take back), else any.
            std::size_t const k = rng() % 4 == 0 ? rng() % live.size() : live.size() - 1;
            if (!intact(live[k])) corrupt.fetch_add(1);
            pool.deallocate(live[k].p, live[k].bytes);
            live[k] = live.back();
            live.pop_back();
          }
        }
        for (auto const& b : live) {
          if (!intact(b)) corrupt.fetch_add(1);
          pool.deallocate(b.p, b.bytes);
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  done = true;
  observer.join();
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(pool.info().used_bytes, 0U);
  static_cast<void>(pool.release());
  EXPECT_EQ(pool.pool_size(), 0U);
  EXPECT_EQ(arena.live_bytes(), 0U);
  EXPECT_EQ(arena.bad_frees(), 0U);
}

// ---- stream ordering on a device (the simulated one, or a real GPU) -------------------

class PoolOnDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::driver_available()) { GTEST_SKIP() << "needs a driver (the simulated device or a GPU)"; }
    ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
    // Memory the pool gives back is handed out again only after the stream it names
    // (as vmm_memory_resource's is): an unordered release shows as a use by the next owner.
    arena_.waits_for_streams(true);
    a_ = make_stream();
    b_ = make_stream();
  }
  void TearDown() override {
    for (CUstream s : {a_, b_}) {
      if (s != nullptr) {
        EXPECT_EQ(detail::driver().cuStreamSynchronize(s), CUDA_SUCCESS);
        EXPECT_EQ(detail::driver().cuStreamDestroy(s), CUDA_SUCCESS);
      }
    }
    if (sim().present()) sim().run_all();
    EXPECT_EQ(arena_.failed_waits(), 0U);  // every stream the pool named was a live one
  }
  static test::sim_control& sim() { return test::sim_control::get(); }
  static CUstream make_stream() {
    CUstream s = nullptr;
    EXPECT_EQ(detail::driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    return s;
  }
  static stream_ref ref(CUstream s) { return stream_ref{s}; }
  /// Calls of `entry` since the last snapshot(); see snapshot().
  struct counts {
    long record, wait, create;
  };
  static counts snapshot() {
    return {sim().call_count("cuEventRecord"), sim().call_count("cuStreamWaitEvent"),
            sim().call_count("cuEventCreate")};
  }
  static counts since(counts const& c) {
    auto const n = snapshot();
    return {n.record - c.record, n.wait - c.wait, n.create - c.create};
  }
  template <class F>
  static F lookup(char const* name) {
    return reinterpret_cast<F>(detail::real_dlsym()(detail::driver().handle, name));
  }

  test::arena_test_resource arena_{64 * MiB};
  CUstream a_{};
  CUstream b_{};
};

/// The event and call counts are the simulated device's.
class PoolOnSim : public PoolOnDevice {
 protected:
  void SetUp() override {
    if (!sim().present()) { GTEST_SKIP() << "needs the simulated device"; }
    PoolOnDevice::SetUp();
  }
};

/// Host work that writes *p = 42 once `open` is set: on a GPU it holds its stream
/// until the test opens the gate; on the simulated device it runs at a sync.
struct gated_write {
  std::atomic<bool>* open;
  int* p;
  static void run(void* d) {
    auto* g = static_cast<gated_write*>(d);
    while (!g->open->load()) std::this_thread::yield();
    *g->p = 42;
  }
};

/// Host work that records what *q holds when it runs.
struct observe {
  int* q;
  int seen;
  static void run(void* d) {
    auto* o = static_cast<observe*>(d);
    o->seen = *o->q;
  }
};

TEST_F(PoolOnSim, SameStreamReuseNeedsNoEvent) {
  pool_memory_resource pool{&arena_, opts(0)};
  auto const before = snapshot();
  void* p = pool.allocate(KiB, ref(a_));
  for (int i = 0; i < 100; ++i) {
    pool.deallocate(p, KiB, ref(a_));
    ASSERT_EQ(pool.allocate(KiB, ref(a_)), p);
  }
  pool.deallocate(p, KiB, ref(a_));
  auto const d = since(before);
  EXPECT_EQ(d.record, 0);
  EXPECT_EQ(d.wait, 0);
  EXPECT_EQ(d.create, 0);
}

TEST_F(PoolOnSim, CrossStreamTakeRecordsOneEventAndOneWait) {
  pool_memory_resource pool{&arena_, opts(0)};
  void* p = pool.allocate(KiB, ref(a_));  // from a 1 MiB slab; the rest stays on A's list
  pool.deallocate(p, KiB, ref(a_));       // A's list: the whole slab, one block
  auto before = snapshot();
  void* q = pool.allocate(KiB, ref(b_));
  EXPECT_EQ(q, p);  // A's memory, now ordered for B: all of it
  auto d = since(before);
  EXPECT_EQ(d.create, 1);
  EXPECT_EQ(d.record, 1);
  EXPECT_EQ(d.wait, 1);
  EXPECT_EQ(arena_.allocations().size(), 1U);

  // B now owns A's whole list: reuse on B is free of events.
  before = snapshot();
  pool.deallocate(q, KiB, ref(b_));
  EXPECT_EQ(pool.allocate(KiB, ref(b_)), p);
  void* more = pool.allocate(2 * KiB, ref(b_));  // the rest of A's list, also B's now
  d = since(before);
  EXPECT_EQ(d.record, 0);
  EXPECT_EQ(d.wait, 0);
  pool.deallocate(more, 2 * KiB, ref(b_));
  pool.deallocate(p, KiB, ref(b_));

  // Back to A, which B took from last: they share. A gets the back half of B's
  // block (B's event is created once), and from then on a thread taking turns
  // between the two streams needs no event at all.
  before = snapshot();
  void* r = pool.allocate(KiB, ref(a_));
  EXPECT_EQ(r, as_char(p) + 512 * KiB);
  d = since(before);
  EXPECT_EQ(d.create, 1);  // B's event; A's already exists
  EXPECT_EQ(d.record, 1);
  EXPECT_EQ(d.wait, 1);
  pool.deallocate(r, KiB, ref(a_));
  before = snapshot();
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(pool.allocate(KiB, ref(b_)), p);
    pool.deallocate(p, KiB, ref(b_));
    ASSERT_EQ(pool.allocate(KiB, ref(a_)), r);
    pool.deallocate(r, KiB, ref(a_));
  }
  d = since(before);
  EXPECT_EQ(d.record, 0);
  EXPECT_EQ(d.wait, 0);
  EXPECT_EQ(arena_.allocations().size(), 1U);
}

TEST_F(PoolOnDevice, TakerRunsOnlyAfterTheFreeingStreamsWork) {
  pool_memory_resource pool{&arena_, opts(256, 256)};  // one block: B can only get the one A's work writes
  auto* p = static_cast<int*>(pool.allocate(256, ref(a_)));
  *p = 0;
  auto const cuLaunchHostFunc = detail::driver().cuLaunchHostFunc;
  std::atomic<bool> open{false};
  gated_write w{&open, p};
  // Work still pending on A writes p when A frees it.
  ASSERT_EQ(cuLaunchHostFunc(a_, &gated_write::run, &w), CUDA_SUCCESS);
  pool.deallocate(p, 256, ref(a_));

  auto* q = static_cast<int*>(pool.allocate(256, ref(b_)));
  ASSERT_EQ(q, p);
  observe o{q, -1};
  ASSERT_EQ(cuLaunchHostFunc(b_, &observe::run, &o), CUDA_SUCCESS);
  open.store(true);
  ASSERT_EQ(detail::driver().cuStreamSynchronize(b_), CUDA_SUCCESS);
  EXPECT_EQ(o.seen, 42);  // B waited for A's write
  pool.deallocate(q, 256, ref(b_));
}

// Queued work standing in for kernels: `stamp` writes a block's tag at both ends
// when its stream reaches it, `check` counts a block whose ends no longer hold the
// tag its stream's earlier stamp wrote (another stream's work reached it first).
struct queued_block {
  unsigned char* p;
  std::size_t bytes;
  unsigned char tag;
  std::atomic<long>* corrupt;
  static void stamp(void* d) {
    auto* b = static_cast<queued_block*>(d);
    b->p[0] = b->tag;
    b->p[b->bytes - 1] = b->tag;
  }
  static void check(void* d) {
    auto* b = static_cast<queued_block*>(d);
    if (b->p[0] != b->tag || b->p[b->bytes - 1] != b->tag) b->corrupt->fetch_add(1);
  }
};

// Several threads taking turns between the same two streams, so one stream's list
// keeps being taken by the other and the taker often gets only the back of a single
// free block (the pool's sharing between two streams): no two live blocks overlap,
// and work queued on a block's stream before its free always runs before work that
// the block's next owner queues on the other stream.
TEST_F(PoolOnDevice, ThreadsTakingTurnsBetweenTwoStreamsNeverOverlapOrOvertake) {
  // The fixture's arena is small enough that the pool gives memory back and grows
  // again (in about two runs of three): a stamp found overwritten there means the
  // pool gave memory back on a stream not ordered after every stream that used it.
  pool_memory_resource pool{&arena_, opts(0)};
  auto const launch = detail::driver().cuLaunchHostFunc;
  std::atomic<long> corrupt{0};
  std::atomic<long> overlaps{0};
  std::mutex live_mutex;
  std::map<std::uintptr_t, std::uintptr_t> live_ranges;  // start -> end, every thread's
  auto const claim = [&](unsigned char* p, std::size_t n) {
    auto const lo = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lock{live_mutex};
    auto next = live_ranges.lower_bound(lo);
    if (next != live_ranges.end() && next->first < lo + n) overlaps.fetch_add(1);
    if (next != live_ranges.begin() && std::prev(next)->second > lo) overlaps.fetch_add(1);
    live_ranges[lo] = lo + n;
  };
  auto const unclaim = [&](unsigned char* p) {
    std::lock_guard lock{live_mutex};
    live_ranges.erase(reinterpret_cast<std::uintptr_t>(p));
  };
  constexpr int thread_count = 4;
  constexpr int rounds = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
      std::mt19937 rng{static_cast<unsigned>(7 + t)};
      std::deque<queued_block> queued;  // stable addresses until the streams drained
      struct held {
        queued_block* b;
        CUstream s;
      };
      std::vector<held> live;
      unsigned char tag = static_cast<unsigned char>(t * 64);
      auto const release_one = [&](std::size_t k) {
        held const h = live[k];
        live[k] = live.back();
        live.pop_back();
        ASSERT_EQ(launch(h.s, &queued_block::check, h.b), CUDA_SUCCESS);
        unclaim(h.b->p);
        pool.deallocate(h.b->p, h.b->bytes, ref(h.s));
      };
      for (int i = 0; i < rounds; ++i) {
        CUstream const s = (i + t) % 2 == 0 ? a_ : b_;  // taking turns
        // Mostly what the sharing serves (up to 1 MiB), now and then more.
        std::size_t const n = rng() % 8 == 0 ? 3 * MiB : 1 + rng() % MiB;
        auto* p = static_cast<unsigned char*>(pool.allocate(n, ref(s)));
        claim(p, n);
        queued.push_back({p, n, ++tag, &corrupt});
        ASSERT_EQ(launch(s, &queued_block::stamp, &queued.back()), CUDA_SUCCESS);
        live.push_back({&queued.back(), s});
        // Free one or two: the list the next turn's stream takes from.
        while (live.size() > 2 || (!live.empty() && rng() % 3 == 0)) release_one(rng() % live.size());
      }
      while (!live.empty()) release_one(0);
      ASSERT_EQ(detail::driver().cuStreamSynchronize(a_), CUDA_SUCCESS);
      ASSERT_EQ(detail::driver().cuStreamSynchronize(b_), CUDA_SUCCESS);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(pool.info().used_bytes, 0U);
}

TEST_F(PoolOnDevice, AnotherThreadsPerThreadStreamIsOrderedThroughTheLegacyStream) {
  pool_memory_resource pool{&arena_, opts(256, 256)};  // one block, as above
  stream_ref const ptds{reinterpret_cast<cudaStream_t>(per_thread_stream_handle)};
  std::atomic<bool> open{false};
  gated_write w{&open, nullptr};
  std::thread other{[&] {
    ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
    w.p = static_cast<int*>(pool.allocate(256, ptds));
    *w.p = 0;
    // Work pending on that thread's per-thread stream, which only it can name.
    ASSERT_EQ(
        detail::driver().cuLaunchHostFunc(reinterpret_cast<CUstream>(per_thread_stream_handle), &gated_write::run, &w),
        CUDA_SUCCESS);
    pool.deallocate(w.p, 256, ptds);
  }};
  other.join();

  long const records = sim().call_count("cuEventRecord");
  long const waits = sim().call_count("cuStreamWaitEvent");
  auto* q = static_cast<int*>(pool.allocate(256, ref(a_)));
  ASSERT_EQ(q, w.p);
  if (sim().present()) {
    EXPECT_EQ(sim().call_count("cuEventRecord") - records, 1);  // on the legacy stream
    EXPECT_EQ(sim().call_count("cuStreamWaitEvent") - waits, 1);
  }
  observe o{q, -1};
  ASSERT_EQ(detail::driver().cuLaunchHostFunc(a_, &observe::run, &o), CUDA_SUCCESS);
  open.store(true);
  ASSERT_EQ(detail::driver().cuStreamSynchronize(a_), CUDA_SUCCESS);
  EXPECT_EQ(o.seen, 42);
  pool.deallocate(q, 256, ref(a_));
}

TEST_F(PoolOnSim, CapturingStreamsAreNeverRecordedOnOrMadeToWait) {
  auto const begin = lookup<CUresult (*)(CUstream, CUstreamCaptureMode)>("cuStreamBeginCapture_v2");
  auto const end = lookup<CUresult (*)(CUstream, CUgraph*)>("cuStreamEndCapture");
  auto const destroy_graph = lookup<CUresult (*)(CUgraph)>("cuGraphDestroy");
  ASSERT_NE(begin, nullptr);
  ASSERT_NE(end, nullptr);
  pool_memory_resource pool{&arena_, opts(0)};
  void* p = pool.allocate(KiB, ref(a_));
  pool.deallocate(p, KiB, ref(a_));

  // The taker captures: it may not wait, so the pool grows instead.
  ASSERT_EQ(begin(b_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  auto before = snapshot();
  void* q = pool.allocate(KiB, ref(b_));
  EXPECT_NE(q, p);
  EXPECT_EQ(since(before).record, 0);
  EXPECT_EQ(since(before).wait, 0);
  CUgraph g = nullptr;
  ASSERT_EQ(end(b_, &g), CUDA_SUCCESS);  // the capture is still valid
  if (g != nullptr && destroy_graph != nullptr) { EXPECT_EQ(destroy_graph(g), CUDA_SUCCESS); }

  // The holder captures: no event is recorded on it, its block stays its own.
  ASSERT_EQ(begin(a_, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  CUstream c = make_stream();
  before = snapshot();
  void* r = pool.allocate(KiB, ref(c));  // takes B's list (A's would fit too)
  EXPECT_EQ(since(before).record, 1);    // B's event, never A's
  EXPECT_NE(r, p);
  g = nullptr;
  ASSERT_EQ(end(a_, &g), CUDA_SUCCESS);
  if (g != nullptr && destroy_graph != nullptr) { EXPECT_EQ(destroy_graph(g), CUDA_SUCCESS); }
  pool.deallocate(q, KiB, ref(b_));
  pool.deallocate(r, KiB, ref(c));
  pool.stream_destroyed(ref(c));
  EXPECT_EQ(detail::driver().cuStreamDestroy(c), CUDA_SUCCESS);
}

TEST_F(PoolOnSim, DestroyedStreamsBlocksWaitOnItsLastEvent) {
  pool_memory_resource pool{&arena_, opts(0)};
  CUstream c = make_stream();
  void* p = pool.allocate(KiB, ref(c));
  pool.deallocate(p, KiB, ref(c));
  auto before = snapshot();
  pool.stream_destroyed(ref(c));
  ASSERT_EQ(detail::driver().cuStreamDestroy(c), CUDA_SUCCESS);
  EXPECT_EQ(since(before).record, 1);

  before = snapshot();
  void* q = pool.allocate(KiB, ref(a_));  // the record has not run: A waits on it
  EXPECT_EQ(q, p);
  EXPECT_EQ(since(before).wait, 1);
  EXPECT_EQ(since(before).record, 0);
  EXPECT_EQ(arena_.allocations().size(), 1U);
  pool.deallocate(q, KiB, ref(a_));
}

TEST_F(PoolOnSim, AHandleSeenAgainAfterStreamDestroyedStartsAFreshList) {
  pool_memory_resource pool{&arena_, opts(0)};
  CUstream c = make_stream();
  void* p = pool.allocate(KiB, ref(c));
  void* q = pool.allocate(KiB, ref(c));
  pool.deallocate(p, KiB, ref(c));
  pool.stream_destroyed(ref(c));    // as if c died and the driver handed its handle out again
  pool.deallocate(q, KiB, ref(c));  // a fresh list for the "new" stream, visible to info()
  auto const i = pool.info();
  EXPECT_EQ(i.used_bytes, 0U);
  EXPECT_EQ(i.free_bytes, pool.pool_size());
  pool.stream_destroyed(ref(c));
  ASSERT_EQ(detail::driver().cuStreamDestroy(c), CUDA_SUCCESS);
}

TEST_F(PoolOnSim, CompletedDestroyedStreamBlocksNeedNoWait) {
  pool_memory_resource pool{&arena_, opts(0)};
  CUstream c = make_stream();
  void* p = pool.allocate(KiB, ref(c));
  pool.deallocate(p, KiB, ref(c));
  pool.stream_destroyed(ref(c));
  ASSERT_EQ(detail::driver().cuStreamDestroy(c), CUDA_SUCCESS);
  sim().run_all();  // the event completes
  auto const before = snapshot();
  EXPECT_EQ(pool.allocate(KiB, ref(a_)), p);
  EXPECT_EQ(since(before).wait, 0);
  EXPECT_EQ(since(before).record, 0);
  pool.deallocate(p, KiB, ref(a_));
  EXPECT_EQ(pool.release(), MiB);
}

TEST_F(PoolOnSim, ReleaseOrdersASlabFreedOnTwoStreams) {
  pool_memory_resource pool{&arena_, opts(0)};
  void* p = pool.allocate(512 * KiB, ref(a_));
  void* q = pool.allocate(512 * KiB, ref(a_));
  ASSERT_EQ(as_char(q), as_char(p) + 512 * KiB);
  pool.deallocate(p, 512 * KiB, ref(a_));
  pool.deallocate(q, 512 * KiB, ref(b_));
  EXPECT_EQ(pool.info().largest_free_block, 512 * KiB);  // two lists: not coalesced
  auto const before = snapshot();
  EXPECT_EQ(pool.release(), MiB);
  auto const d = since(before);
  EXPECT_EQ(d.record, 1);  // one holder's event ...
  EXPECT_EQ(d.wait, 1);    // ... awaited by the stream the slab is freed on
  auto const frees = arena_.deallocations();
  ASSERT_EQ(frees.size(), 1U);
  EXPECT_EQ(frees[0].ptr, p);
  EXPECT_EQ(frees[0].bytes, MiB);
  auto const on = frees[0].stream;
  EXPECT_TRUE(on == reinterpret_cast<std::uintptr_t>(a_) || on == reinterpret_cast<std::uintptr_t>(b_));
  EXPECT_EQ(pool.pool_size(), 0U);
}

TEST_F(PoolOnSim, AnotherStreamGathersADeferredFreeInsteadOfGrowing) {
  pool_memory_resource pool{&arena_, opts(MiB, MiB)};  // one slab, no room to grow
  void* p = pool.allocate(MiB, ref(a_));
  pool.deallocate(p, MiB, ref(a_));  // deferred in A's slot
  auto const before = snapshot();
  EXPECT_EQ(pool.allocate(MiB, ref(b_)), p);  // gathered from A, ordered after it
  EXPECT_EQ(since(before).record, 1);
  EXPECT_EQ(since(before).wait, 1);
  EXPECT_EQ(arena_.allocations().size(), 1U);
  pool.deallocate(p, MiB, ref(b_));
}

TEST_F(PoolOnSim, ADestroyedStreamsDeferredFreeNeverServesANewStreamWithItsHandleUnordered) {
  pool_memory_resource pool{&arena_, opts(MiB, MiB)};  // one slab: the block is all there is
  CUstream c = make_stream();
  void* p = pool.allocate(MiB, ref(c));
  pool.deallocate(p, MiB, ref(c));  // deferred in c's slot
  auto before = snapshot();
  pool.stream_destroyed(ref(c));  // as if c died and the driver handed its handle out again
  EXPECT_EQ(since(before).record, 1);
  before = snapshot();
  EXPECT_EQ(pool.allocate(MiB, ref(c)), p);  // the "new" c gets it behind the old one's event
  EXPECT_EQ(since(before).wait, 1);
  pool.deallocate(p, MiB, ref(c));
  pool.stream_destroyed(ref(c));
  ASSERT_EQ(detail::driver().cuStreamDestroy(c), CUDA_SUCCESS);
}

TEST_F(PoolOnSim, EightThreadsOnTheirOwnStreamsFreeingEachOthersBlocks) {
  pool_memory_resource pool{&arena_, opts(0)};
  std::atomic<long> corrupt{0};
  std::mutex exchange_mutex;
  std::deque<live_block> exchange;  // blocks handed to another thread to free
  std::vector<CUstream> streams;
  for (int t = 0; t < 8; ++t) streams.push_back(make_stream());
  sim().reset_violations();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
      stream_ref const s{streams[static_cast<std::size_t>(t)]};
      std::mt19937 rng{static_cast<unsigned>(99 + t)};
      std::uniform_int_distribution<std::size_t> size{1, 8 * KiB};
      std::vector<live_block> live;
      unsigned char tag = static_cast<unsigned char>(t * 32);
      auto const release_block = [&](live_block const& b) {
        if (!intact(b)) corrupt.fetch_add(1);
        pool.deallocate(b.p, b.bytes, s);
      };
      for (int i = 0; i < 1500; ++i) {
        auto const r = rng() % 6;
        if (live.empty() || r < 3) {
          std::size_t const n = size(rng);
          auto* p = static_cast<unsigned char*>(pool.allocate(n, s));
          std::memset(p, ++tag, n);
          live.push_back({p, n, tag});
        } else if (r == 3) {  // hand one over
          std::lock_guard lock{exchange_mutex};
          exchange.push_back(live.back());
          live.pop_back();
        } else if (r == 4) {  // free one handed over by someone else
          std::optional<live_block> b;
          {
            std::lock_guard lock{exchange_mutex};
            if (!exchange.empty()) {
              b = exchange.front();
              exchange.pop_front();
            }
          }
          if (b) release_block(*b);
        } else {
          std::size_t const k = rng() % live.size();
          release_block(live[k]);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (auto const& b : live) release_block(b);
    });
  }
  for (auto& th : threads) th.join();
  for (auto const& b : exchange) pool.deallocate(b.p, b.bytes, stream_ref{streams[0]});
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(pool.info().used_bytes, 0U);
  EXPECT_EQ(sim().violations(), 0);
  for (CUstream s : streams) {
    pool.stream_destroyed(stream_ref{s});
    EXPECT_EQ(detail::driver().cuStreamDestroy(s), CUDA_SUCCESS);
  }
  sim().run_all();  // every destroyed stream's event completes
  std::size_t const reserved = pool.pool_size();
  EXPECT_GT(reserved, 0U);
  EXPECT_EQ(pool.release(), reserved);
  EXPECT_EQ(pool.pool_size(), 0U);
  EXPECT_EQ(arena_.live_bytes(), 0U);
}

}  // namespace
}  // namespace gpumem
