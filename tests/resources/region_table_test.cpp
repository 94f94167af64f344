// region_table: the upstream allocations of a stream-ordered caching resource:
// lookups (with per-thread hints that a removal invalidates), sizes, payloads at
// stable addresses, the reserved total, and its invariants in debug builds.

#include "pool/region_table.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace gpumem::detail {
namespace {

alignas(256) char storage[16384 + 256];
char* const arena = storage + 256;  // with room below, for the look-up just before it

TEST(RegionTable, FindsTheRegionHoldingAnAddress) {
  region_table<> t;
  t.insert(arena, 4096);
  t.insert(arena + 8192, 2048);
  EXPECT_EQ(t.reserved_bytes(), 6144U);
  auto const r = t.find(arena + 4095);
  ASSERT_TRUE(r);
  EXPECT_EQ(r.base, arena);
  EXPECT_EQ(r.size, 4096U);
  EXPECT_FALSE(t.find(arena + 4096));  // the gap between regions
  EXPECT_FALSE(t.find(arena + 8192 + 2048));
  EXPECT_FALSE(t.find(arena - 1));
  EXPECT_TRUE(t.contains(arena + 8192));
  EXPECT_EQ(t.size_at(arena + 8192), 2048U);
  EXPECT_EQ(t.size_at(arena + 256), 0U);  // inside, not a base
}

TEST(RegionTable, ARemovedRegionIsNotFoundThroughAnyThreadsHint) {
  region_table<> t;
  t.insert(arena, 4096);
  ASSERT_TRUE(t.find(arena + 100));  // this thread's hint now names the region
  std::thread other{[&] { EXPECT_TRUE(t.find(arena + 200)); }};
  other.join();
  EXPECT_EQ(t.erase(arena), 4096U);
  EXPECT_FALSE(t.find(arena + 100));
  std::thread again{[&] { EXPECT_FALSE(t.find(arena + 200)); }};
  again.join();
  EXPECT_EQ(t.reserved_bytes(), 0U);
  EXPECT_EQ(t.erase(arena), 0U);  // already gone
}

TEST(RegionTable, PayloadsStayWhereTheyAre) {
  struct bits {
    int value;
  };
  region_table<bits> t;
  bits& a = t.insert(arena, 1024, bits{7});
  for (int i = 1; i < 8; ++i) t.insert(arena + i * 1024, 1024, bits{i});
  EXPECT_EQ(&a, t.find(arena + 10).payload);
  EXPECT_EQ(t.find(arena + 10).payload->value, 7);
  std::vector<char*> bases;
  t.for_each([&](char* base, std::size_t size) {
    EXPECT_EQ(size, 1024U);
    bases.push_back(base);
  });
  ASSERT_EQ(bases.size(), 8U);
  EXPECT_TRUE(std::is_sorted(bases.begin(), bases.end()));
}

TEST(RegionTable, TablesKeepTheirOwnHints) {
  region_table<> a;
  region_table<> b;
  a.insert(arena, 4096);
  b.insert(arena + 4096, 4096);
  ASSERT_TRUE(a.find(arena + 1));
  EXPECT_FALSE(b.find(arena + 1));  // a's hint says nothing about b
  EXPECT_TRUE(b.find(arena + 4097));
  EXPECT_FALSE(a.find(arena + 4097));
}

#ifndef NDEBUG
TEST(RegionTableDeathTest, OverlappingRegionsAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        region_table<> t;
        t.insert(arena, 4096);
        t.insert(arena + 2048, 4096);
      },
      "region table: overlapping regions");
}
#endif

}  // namespace
}  // namespace gpumem::detail
