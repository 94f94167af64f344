// stream_free_lists on its own: the borrowed-entry rule, checked in debug builds
// (an entry from borrow() used after a lookup or an upstream call aborts), and the
// pending accounting that reclaim() checks.

#include <gpumem/detail/coalescing_free_list.hpp>
#include <gpumem/detail/stream_free_lists.hpp>

#include <gtest/gtest.h>

#include <cstdint>

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
