// Log analysis against logs whose answers are worked out by hand in the comments.
#include <gpumem/tools/log_analysis.hpp>

#include "tools/tool_test_support.hpp"

#include <gtest/gtest.h>

using namespace gpumem::tools;
using gpumem::test::gpumem_log;

namespace {

log_summary summarize(gpumem_log const& l, std::size_t top_n = 10) {
  auto const log = parse_log(l.text(), "x.csv");
  EXPECT_TRUE(log.readable);
  EXPECT_EQ(log.warning_count, 0u);
  return analyze(log, top_n);
}

}  // namespace

TEST(LogAnalysis, PeakLeaksAndTotals) {
  gpumem_log l;
  l.alloc(0xa00, 100, 10)    // live 100
      .alloc(0xb00, 200, 20)  // 300
      .free(0xa00, 100, 30)   // 200
      .alloc(0xc00, 50, 40)   // 250
      .alloc(0xd00, 1000, 50) // 1250  <- peak, event #4, line 6
      .free(0xd00, 1000, 60)  // 250
      .free(0xb00, 200, 70);  // 50: 0xc00 never freed
  auto const s = summarize(l);
  EXPECT_EQ(s.events, 7u);
  EXPECT_EQ(s.allocations, 4u);
  EXPECT_EQ(s.frees, 3u);
  EXPECT_EQ(s.failures, 0u);
  EXPECT_EQ(s.bytes_allocated, 1350u);
  EXPECT_EQ(s.bytes_freed, 1300u);
  EXPECT_EQ(s.peak_live_bytes, 1250u);
  ASSERT_TRUE(s.peak_live_at);
  EXPECT_EQ(s.peak_live_at->event_index, 4u);
  EXPECT_EQ(s.peak_live_at->line, 6u);
  EXPECT_EQ(s.peak_live_at->time_ns, 50);
  EXPECT_EQ(s.live_at_end_bytes, 50u);
  ASSERT_EQ(s.leaks.size(), 1u);
  EXPECT_EQ(s.leaks[0].pointer, 0xc00u);
  EXPECT_EQ(s.leaks[0].size, 50u);
  EXPECT_EQ(s.leaks[0].at.line, 5u);
  EXPECT_EQ(s.first_time_ns, 10);
  EXPECT_EQ(s.last_time_ns, 70);
  ASSERT_EQ(s.timeline.size(), 7u);
  EXPECT_EQ(s.timeline[3].live, 250u);
  EXPECT_EQ(s.timeline[3].time_ns, 40);
  EXPECT_FALSE(s.peak_reserved_bytes);
}

TEST(LogAnalysis, FreeUsesTheAllocatedSizeAndListsUnknownFrees) {
  gpumem_log l;
  l.alloc(0x100, 4096, 1)
      .free(0x100, 1, 2)     // caller passed a wrong size: 4096 still leaves
      .free(0x100, 4096, 3)  // double free: unknown
      .free(0x999, 8, 4)     // never allocated: unknown
      .free(0, 0, 5);        // free(nullptr): counted, owns nothing
  auto const s = summarize(l);
  EXPECT_EQ(s.live_at_end_bytes, 0u);
  EXPECT_EQ(s.bytes_freed, 4096u);
  EXPECT_EQ(s.frees, 4u);
  ASSERT_EQ(s.unknown_frees.size(), 2u);
  EXPECT_EQ(s.unknown_frees[0].pointer, 0x100u);
  EXPECT_EQ(s.unknown_frees[0].at.line, 4u);
  EXPECT_EQ(s.unknown_frees[1].pointer, 0x999u);
  EXPECT_EQ(s.unknown_frees[1].size, 8u);
}

TEST(LogAnalysis, ReusedLivePointerReplacesTheOldRecord) {
  gpumem_log l;
  l.alloc(0x100, 10, 1).alloc(0x100, 30, 2);
  auto const s = summarize(l);
  EXPECT_EQ(s.reused_live_pointers, 1u);
  EXPECT_EQ(s.live_at_end_bytes, 30u);
  EXPECT_EQ(s.peak_live_bytes, 30u);
  ASSERT_EQ(s.leaks.size(), 1u);
  EXPECT_EQ(s.leaks[0].size, 30u);
}

TEST(LogAnalysis, PowerOfTwoHistogram) {
  gpumem_log l;
  std::uint64_t p = 0x1000;
  for (std::uint64_t size : {1u, 255u, 256u, 511u, 1000u, 1024u, 1024u}) l.alloc(p += 0x1000, size, 1);
  l.alloc(0, 0, 2);  // zero-byte allocation: null pointer, bucket 0
  auto const s = summarize(l);
  ASSERT_EQ(s.histogram.size(), 6u);
  auto expect = [&](std::size_t i, std::uint64_t lo, std::uint64_t hi, std::uint64_t count, std::uint64_t bytes) {
    EXPECT_EQ(s.histogram[i].lo, lo) << i;
    EXPECT_EQ(s.histogram[i].hi, hi) << i;
    EXPECT_EQ(s.histogram[i].count, count) << i;
    EXPECT_EQ(s.histogram[i].bytes, bytes) << i;
  };
  expect(0, 0, 0, 1, 0);
  expect(1, 1, 1, 1, 1);
  expect(2, 128, 255, 1, 255);
  expect(3, 256, 511, 2, 767);
  expect(4, 512, 1023, 1, 1000);
  expect(5, 1024, 2047, 2, 2048);
}

TEST(LogAnalysis, HistogramTopBucket) {
  gpumem_log l;
  l.alloc(0x1000, 1024, 1).alloc(0x2000, 2047, 2).alloc(0x3000, std::uint64_t{1} << 63, 3);
  auto const s = summarize(l);
  ASSERT_EQ(s.histogram.size(), 2u);
  EXPECT_EQ(s.histogram[0].lo, 1024u);
  EXPECT_EQ(s.histogram[0].hi, 2047u);
  EXPECT_EQ(s.histogram[0].count, 2u);
  EXPECT_EQ(s.histogram[1].lo, std::uint64_t{1} << 63);
  EXPECT_EQ(s.histogram[1].hi, ~std::uint64_t{0});
}

TEST(LogAnalysis, LargestAllocationsAreTheTopNLargestFirstOldestOnTies) {
  gpumem_log l;
  std::uint64_t p = 0;
  for (std::uint64_t size : {5u, 9u, 1u, 9u, 7u, 3u}) {
    p += 0x100;
    l.alloc(p, size, static_cast<std::int64_t>(p));
  }
  auto const s = summarize(l, 3);
  ASSERT_EQ(s.largest.size(), 3u);
  EXPECT_EQ(s.largest[0].size, 9u);
  EXPECT_EQ(s.largest[0].at.event_index, 1u);
  EXPECT_EQ(s.largest[1].size, 9u);
  EXPECT_EQ(s.largest[1].at.event_index, 3u);
  EXPECT_EQ(s.largest[2].size, 7u);
  // Leaks list every survivor, largest first.
  ASSERT_EQ(s.leaks.size(), 6u);
  EXPECT_EQ(s.leaks[5].size, 1u);
}

TEST(LogAnalysis, FailuresAndPerThreadPerStreamCounts) {
  gpumem_log l;
  l.alloc(0x100, 10, 1, 7, "0x1")
      .alloc(0x200, 20, 2, 8, "0x5000")
      .fail(1ull << 40, 3, 8)
      .free(0x100, 10, 4, 8, "0x5000")
      .fail(64, 5, 7, "CUDA_ERROR_INVALID_VALUE");
  auto const s = summarize(l);
  ASSERT_EQ(s.failed.size(), 2u);
  EXPECT_EQ(s.failed[0].size, 1ull << 40);
  EXPECT_EQ(s.failed[0].thread, 8u);
  EXPECT_EQ(s.failed[0].at.line, 4u);
  EXPECT_EQ(s.failed[1].size, 64u);
  ASSERT_EQ(s.threads.size(), 2u);
  EXPECT_EQ(s.threads[0].key, 7u);
  EXPECT_EQ(s.threads[0].allocations, 1u);
  EXPECT_EQ(s.threads[0].failures, 1u);
  EXPECT_EQ(s.threads[0].frees, 0u);
  EXPECT_EQ(s.threads[1].key, 8u);
  EXPECT_EQ(s.threads[1].allocations, 1u);
  EXPECT_EQ(s.threads[1].frees, 1u);
  EXPECT_EQ(s.threads[1].failures, 1u);
  EXPECT_EQ(s.threads[1].bytes_allocated, 20u);
  ASSERT_EQ(s.streams.size(), 2u);
  EXPECT_EQ(s.streams[0].key, 1u);  // both failures logged on 0x1
  EXPECT_EQ(s.streams[0].failures, 2u);
  EXPECT_EQ(s.streams[1].key, 0x5000u);
  EXPECT_EQ(s.streams[1].allocations, 1u);
  EXPECT_EQ(s.streams[1].frees, 1u);
}

TEST(LogAnalysis, PeakReservedWhenTheLogHasIt) {
  auto const log = parse_log(
      "Action,Pointer,Size,TimeNs,Reserved\n"
      "allocate,0x100,10,1,2097152\n"
      "allocate,0x200,10,2,4194304\n"
      "free,0x100,10,3,4194304\n"
      "free,0x200,10,4,2097152\n",
      "r.csv");
  auto const s = analyze(log);
  ASSERT_TRUE(s.peak_reserved_bytes);
  EXPECT_EQ(*s.peak_reserved_bytes, 4194304u);
  EXPECT_EQ(s.peak_reserved_at->line, 3u);
  EXPECT_EQ(s.timeline[3].reserved, 2097152);
}

TEST(LogAnalysis, CombinedPeakIsOnTheMergedTimeline) {
  // rank 0 holds 100 B during [10, 30); rank 1 holds 200 B during [20, 40).
  // Separately the peaks are 100 and 200; together 300 during [20, 30).
  gpumem_log r0, r1;
  r0.alloc(0x100, 100, 10).free(0x100, 100, 30).alloc(0x300, 5, 50);
  r1.alloc(0x200, 200, 20).free(0x200, 200, 40);
  auto const s0 = summarize(r0), s1 = summarize(r1);
  auto const c = combine({&s0, &s1});
  EXPECT_EQ(c.logs, 2u);
  EXPECT_EQ(c.events, 5u);
  EXPECT_EQ(c.allocations, 3u);
  EXPECT_EQ(c.peak_live_bytes, 300u);
  EXPECT_EQ(c.peak_time_ns, 20);
  EXPECT_EQ(c.peak_log, 1u);
  EXPECT_EQ(c.peak_at.line, 2u);
  EXPECT_EQ(c.live_at_end_bytes, 5u);
  EXPECT_EQ(c.leaked_allocations, 1u);
  ASSERT_EQ(c.timeline.size(), 5u);
  std::vector<std::uint64_t> live;
  for (auto const& p : c.timeline) live.push_back(p.live);
  EXPECT_EQ(live, (std::vector<std::uint64_t>{100, 300, 200, 0, 5}));
}

TEST(LogAnalysis, CombineKeepsEachLogsOwnOrder) {
  // A thread that raced to the log wrote an older time after a newer one; the
  // merged timeline must not move that free before its allocate.
  gpumem_log r0, r1;
  r0.alloc(0x100, 100, 50).free(0x100, 100, 40);
  r1.alloc(0x200, 1, 45);
  auto const s0 = summarize(r0), s1 = summarize(r1);
  auto const c = combine({&s0, &s1});
  std::vector<std::uint64_t> live;
  for (auto const& p : c.timeline) live.push_back(p.live);
  EXPECT_EQ(live, (std::vector<std::uint64_t>{1, 101, 1}));
  EXPECT_EQ(c.peak_live_bytes, 101u);
}

TEST(LogAnalysis, DownsampleKeepsPeaksAndEnds) {
  std::vector<timeline_point> tl;
  for (int i = 0; i < 10000; ++i) tl.push_back({i, static_cast<std::uint64_t>(i % 100), -1, 0});
  tl[5555].live = 1'000'000;
  auto const d = downsample(tl, 400);
  EXPECT_LE(d.size(), 400u);
  EXPECT_GE(d.size(), 100u);
  EXPECT_EQ(d.front().time_ns, 0);
  EXPECT_EQ(d.back().time_ns, 9999);
  bool peak = false;
  for (auto const& p : d) peak = peak || (p.live == 1'000'000 && p.time_ns == 5555);
  EXPECT_TRUE(peak);
  for (std::size_t i = 1; i < d.size(); ++i) EXPECT_LT(d[i - 1].time_ns, d[i].time_ns);
  EXPECT_EQ(downsample(tl, 20000).size(), tl.size());
}

TEST(LogAnalysis, PerDeviceCountsOnlyWithADeviceColumn) {
  auto const log = parse_log(
      "Action,Pointer,Size,TimeNs,Device\n"
      "allocate,0x100,10,1,0\n"
      "allocate,0x200,20,2,1\n"
      "free,0x100,10,3,0\n"
      "allocate,0x300,30,4,1\n",
      "d.csv");
  auto const s = analyze(log);
  ASSERT_EQ(s.devices.size(), 2u);
  EXPECT_EQ(s.devices[0].key, 0u);
  EXPECT_EQ(s.devices[0].allocations, 1u);
  EXPECT_EQ(s.devices[0].frees, 1u);
  EXPECT_EQ(s.devices[1].key, 1u);
  EXPECT_EQ(s.devices[1].allocations, 2u);
  EXPECT_EQ(s.devices[1].bytes_allocated, 50u);
  EXPECT_EQ(s.peak_live_bytes, 50u);  // live bytes are summed over the devices
  auto const rmm = analyze(parse_log("Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00,allocate,0x1,8,0\n", "r"));
  EXPECT_TRUE(rmm.devices.empty());
}
