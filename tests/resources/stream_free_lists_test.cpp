// stream_free_lists on its own: the borrowed-entry rule, checked in debug builds
// (an entry from borrow() used after a lookup or an upstream call aborts), the
// pending accounting that reclaim() checks, the move stamps that keep a
// request from failing while free memory is between two lists, and deferred
// frees (who may defer, and that every holder of an entry's lock files them).

#include "pool/stream_free_lists.hpp"
#include <gpumem/detail/driver_api.hpp>
#include "pool/coalescing_free_list.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem::detail {
namespace {

using lists_type = stream_free_lists<coalescing_free_list>;

stream_ref stream(std::uintptr_t h) { return stream_ref{reinterpret_cast<CUstream>(h)}; }

TEST(StreamFreeLists, ABorrowedEntryServesUntilTheNextLookup) {
  lists_type lists;
  auto const e = lists.borrow(stream(0x1000));
  {
    std::lock_guard lock{e->mutex};
    alignas(256) static char mem[1024];
    EXPECT_TRUE(e->list.insert({mem, 1024, mem}));
  }
  EXPECT_EQ(e->list.total_bytes(), 1024U);
  // get() hands out an owned reference that outlives any later lookup.
  auto const owned = lists.get(stream(0x1000));
  static_cast<void>(lists.get(stream(0x2000)));
  EXPECT_EQ(owned->list.total_bytes(), 1024U);
}

TEST(StreamFreeLists, PendingBytesAreTheSumOfWhatWasFiled) {
  lists_type lists;
  alignas(256) static char mem[4096];
  EXPECT_TRUE(lists.add_pending({mem, 1024, mem}, 1024));
  EXPECT_TRUE(lists.add_pending({mem + 1024, 512, mem}, 512));
  EXPECT_EQ(lists.pending_bytes(), 1536U);
}

// The estimate a synchronous allocation reads instead of every shard: a shard
// publishes once 16 blocks or 64 KiB wait beyond what it published, so it never
// exceeds the exact count and lags it by less than that; a reclaim takes it back.
TEST(StreamFreeLists, ThePendingEstimateLagsTheExactCountByLessThanAPublish) {
  lists_type lists;
  alignas(256) static char mem[64 * 1024 + 32 * 256];
  for (std::size_t i = 0; i < lists_type::publish_blocks - 1; ++i) {
    ASSERT_TRUE(lists.add_pending({mem + i * 256, 256, mem}, 256));
  }
  EXPECT_EQ(lists.pending_blocks(), lists_type::publish_blocks - 1);
  EXPECT_EQ(lists.pending_estimate().blocks, 0U);  // not published yet
  ASSERT_TRUE(lists.add_pending({mem + 15 * 256, 256, mem}, 256));
  EXPECT_EQ(lists.pending_estimate().blocks, lists_type::publish_blocks);
  EXPECT_EQ(lists.pending_estimate().bytes, lists_type::publish_blocks * 256);
  // One large block publishes at once.
  ASSERT_TRUE(lists.add_pending({mem + 16 * 256, 64 * 1024, mem}, 64 * 1024));
  EXPECT_EQ(lists.pending_estimate().bytes, lists.pending_bytes());
  EXPECT_EQ(lists.pending_estimate().blocks, lists.pending_blocks());
  // From another thread: its own shard, published on its own.
  std::thread{[&] { ASSERT_TRUE(lists.add_pending({mem + 16 * 256 + 64 * 1024, 256, mem}, 256)); }}.join();
  EXPECT_EQ(lists.pending_blocks(), lists_type::publish_blocks + 2);
  EXPECT_EQ(lists.pending_estimate().blocks, lists_type::publish_blocks + 1);
}

/// The free blocks of `list`, as (offset from `base`, size), in address order.
std::vector<std::pair<std::ptrdiff_t, std::size_t>> blocks_of(coalescing_free_list const& list, char const* base) {
  std::vector<std::pair<std::ptrdiff_t, std::size_t>> out;
  list.for_each([&](free_block const& b) { out.emplace_back(b.ptr - base, b.size); });
  std::sort(out.begin(), out.end());
  return out;
}

// A reclaim files thousands of pending blocks: neighbours of one slab are joined
// before they reach the list, whatever their order, with the same result as one
// insert per block; neighbours of two slabs never join.
TEST(StreamFreeLists, PendingNeighboursAreFiledAsRuns) {
  alignas(256) static char mem[64 * 256];
  char* const a = mem;             // slab a: the first 48 blocks
  char* const b = mem + 48 * 256;  // slab b, right after a's end: never joined to it
  std::vector<free_block> batch;
  for (int i = 0; i < 16; ++i) batch.push_back({a + i * 256, 256, a});    // ascending
  for (int i = 31; i >= 20; --i) batch.push_back({a + i * 256, 256, a});  // descending, after a gap
  batch.push_back({a + 47 * 256, 256, a});                                // a's last block, then b's first
  batch.push_back({b, 256, b});
  batch.push_back({b + 256, 512, b});
  batch.push_back({a + 40 * 256, 256, a});  // alone
  coalescing_free_list runs;
  runs.add_all(batch);
  coalescing_free_list one_by_one;
  for (auto const& blk : batch) one_by_one.add(blk);
  using blocks = std::vector<std::pair<std::ptrdiff_t, std::size_t>>;
  EXPECT_EQ(blocks_of(runs, mem),
            (blocks{{0, 16 * 256}, {20 * 256, 12 * 256}, {40 * 256, 256}, {47 * 256, 256}, {48 * 256, 768}}));
  EXPECT_EQ(blocks_of(runs, mem), blocks_of(one_by_one, mem));
  EXPECT_EQ(runs.total_bytes(), one_by_one.total_bytes());
}

// A block freed twice and filed twice: the list refuses the overlap and stays
// consistent (never more bytes than the distinct blocks hold).
TEST(StreamFreeLists, ATwiceFiledPendingBlockNeverCorruptsTheList) {
  alignas(256) static char mem[8 * 256];
  std::vector<free_block> batch{{mem, 256, mem}, {mem + 256, 256, mem}, {mem + 256, 256, mem}, {mem + 512, 256, mem}};
  coalescing_free_list list;
  list.add_all(batch);
  EXPECT_LE(list.total_bytes(), 3U * 256);
  EXPECT_GE(list.total_bytes(), 256U);
  list.for_each([&](free_block const& blk) {
    EXPECT_GE(blk.ptr, mem);
    EXPECT_LE(blk.end(), mem + 3 * 256);
  });
}

TEST(StreamFreeLists, AMoveUnderWayOrDoneMeanLookingAgain) {
  lists_type lists;
  auto const before = lists.moves();
  EXPECT_TRUE(before.quiet_since(before));
  {
    lists_type::move_scope const moving{lists};
    auto const during = lists.moves();
    EXPECT_FALSE(during.quiet_since(before));  // one started
    EXPECT_FALSE(during.quiet_since(during));  // and is still under way
  }
  auto const after = lists.moves();
  EXPECT_FALSE(after.quiet_since(before));  // one happened in between
  EXPECT_TRUE(after.quiet_since(after));
}

TEST(StreamFreeLists, WaitForMovesReturnsOnlyOnceTheMovesUnderWayEnded) {
  lists_type lists;
  std::atomic<bool> started{false};
  std::atomic<bool> ended{false};
  std::thread mover{[&] {
    lists_type::move_scope const moving{lists};
    started = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ended = true;
  }};
  while (!started) std::this_thread::yield();
  lists.wait_for_moves(lists.moves());
  EXPECT_TRUE(ended.load());
  mover.join();
}

// ---- deferred frees ------------------------------------------------------------

TEST(StreamFreeLists, TheFirstThreadToFreeOnAStreamOwnsItsEntryUntilItExits) {
  lists_type lists;
  auto const s = stream(0x1000);
  alignas(256) static char mem[4096];
  std::atomic<int> step{0};
  bool a_owns = false;
  bool a_deferred = false;
  std::thread a{[&] {
    auto const e = lists.borrow(s);
    a_owns = lists.owns(e);
    a_deferred = e->defer({mem, 1024, mem});  // left in the slot as the thread exits
    step = 1;
    while (step.load() != 2) std::this_thread::yield();
  }};
  while (step.load() != 1) std::this_thread::yield();
  EXPECT_TRUE(a_owns);
  EXPECT_TRUE(a_deferred);
  bool b_owns = true;
  std::thread b{[&] { b_owns = lists.owns(lists.borrow(s)); }};
  b.join();
  EXPECT_FALSE(b_owns);                       // a live owner keeps it
  EXPECT_FALSE(lists.owns(lists.borrow(s)));  // this thread neither
  step = 2;
  a.join();

  // The owner exited: the next thread to free there claims the entry; its slot
  // still holds the exited owner's block, so it files under the lock instead.
  bool c_owns = false;
  bool c_deferred = true;
  std::thread c{[&] {
    auto const e = lists.borrow(s);
    c_owns = lists.owns(e);
    c_deferred = e->defer({mem + 2048, 1024, mem});
  }};
  c.join();
  EXPECT_TRUE(c_owns);
  EXPECT_FALSE(c_deferred);
  auto const e = lists.get(s);
  std::lock_guard lock{*e};
  EXPECT_EQ(e->list.total_bytes(), 1024U);  // the exited owner's free, filed by the lock
}

TEST(StreamFreeLists, LockingAnEntryFilesItsDeferredFreeAndDropsADoubleFree) {
  lists_type lists;
  auto const e = lists.borrow(stream(0x1000));
  ASSERT_TRUE(lists.owns(e));
  alignas(256) static char mem[4096];
  ASSERT_TRUE(e->defer({mem, 1024, mem}));
  EXPECT_FALSE(e->defer({mem + 1024, 1024, mem}));  // one block at a time
  EXPECT_TRUE(e->has_deferred());
  EXPECT_EQ(e->list.total_bytes(), 0U);
  {
    std::lock_guard lock{*e};
    EXPECT_FALSE(e->has_deferred());
    EXPECT_EQ(e->list.total_bytes(), 1024U);
  }
  ASSERT_TRUE(e->defer({mem, 1024, mem}));  // freed again: a double free
  ASSERT_TRUE(e->try_lock());
  EXPECT_FALSE(e->has_deferred());
  EXPECT_EQ(e->list.total_bytes(), 1024U);  // dropped, not filed twice
  e->unlock();
}

TEST(StreamFreeLists, EveryObserverSeesADeferredFree) {
  lists_type lists;
  alignas(256) static char mem[8192];
  auto const defer = [&](std::uintptr_t h, char* p) {
    auto const e = lists.borrow(stream(h));
    ASSERT_TRUE(lists.owns(e));
    ASSERT_TRUE(e->defer({p, 1024, mem}));
  };
  defer(0x1000, mem);
  EXPECT_EQ(lists.stream_bytes(), 1024U);  // what growth and reclamation weigh
  defer(0x2000, mem + 2048);
  lists.with_all_locked([&](lists_type::locked_view& v) {  // info(), release()
    std::size_t total = 0;
    for (auto const* e : v.entries) total += e->list.free_bytes();
    EXPECT_EQ(total, 2048U);
  });
  // A destroyed stream's list leaves with its deferred free (to a batch, or to the
  // quarantine where no event can order it); a stream seen later with the same
  // handle starts empty. A real stream: stream_destroyed() records an event on it,
  // and a real driver crashes on a made-up handle.
  if (ensure_context() != CUDA_SUCCESS) GTEST_SKIP() << "the rest needs a CUDA driver (simulated or real)";
  CUstream real{};
  ASSERT_EQ(driver().cuStreamCreate(&real, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  auto const key = reinterpret_cast<std::uintptr_t>(real);
  defer(key, mem + 4096);
  lists.stream_destroyed(stream_ref{real});
  lists.with_all_locked([&](lists_type::locked_view& v) {
    std::size_t gone = v.quarantine.free_bytes();
    for (auto const& b : v.foreign) gone += b.list.free_bytes();
    EXPECT_EQ(gone, 1024U);
    for (auto const* e : v.entries) EXPECT_NE(e->id.key, key);
  });
  auto const fresh = lists.borrow(stream_ref{real});
  EXPECT_FALSE(fresh->has_deferred());
  {
    std::lock_guard lock{*fresh};
    EXPECT_TRUE(fresh->list.empty());
  }
  lists.stream_destroyed(stream_ref{real});
  EXPECT_EQ(driver().cuStreamDestroy(real), CUDA_SUCCESS);
}

#ifndef NDEBUG
class StreamFreeListsDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(StreamFreeListsDeathTest, ABorrowedEntryUsedAfterAnotherLookupAborts) {
  lists_type lists;
  auto const e = lists.borrow(stream(0x1000));
  static_cast<void>(lists.get(stream(0x2000)));  // may replace the hint that kept e alive
  EXPECT_DEATH(static_cast<void>(e->clean), "borrowed free-list entry was used after a lookup or an upstream call");
}

TEST_F(StreamFreeListsDeathTest, ABorrowedEntryUsedAfterAnUpstreamCallAborts) {
  lists_type lists;
  auto const e = lists.borrow(stream(0x1000));
  end_borrows();  // what a resource does before it calls its upstream
  EXPECT_DEATH(static_cast<void>(*e), "borrowed free-list entry");
}
#else
TEST(StreamFreeListsDeathTest, ChecksNeedADebugBuild) { GTEST_SKIP() << "GPUMEM_ASSERT is compiled out (NDEBUG)"; }
#endif

}  // namespace
}  // namespace gpumem::detail
