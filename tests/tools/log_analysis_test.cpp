// Log analysis against logs whose answers are worked out by hand in the comments.
#include "log_analysis.hpp"
#include "log_merge.hpp"
#include "log_reader.hpp"

#include "tools/tool_test_support.hpp"

#include <gtest/gtest.h>

using namespace gpumem::tools;
using gpumem::test::gpumem_log;

namespace {

log_summary summarize(gpumem_log const& l, std::size_t top_n = 10) {
  auto s = analyze(l.text(), "x.csv", top_n);
  EXPECT_EQ(s.warning_count, 0u);
  return s;
}

/// Several logs in one merged pass.
merged_analysis merge(std::vector<std::string> const& texts, std::size_t top_n = 10) {
  std::vector<std::unique_ptr<log_reader>> readers;
  std::vector<log_reader*> ptrs;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    readers.push_back(std::make_unique<log_reader>(texts[i], "rank" + std::to_string(i) + ".csv"));
    ptrs.push_back(readers.back().get());
  }
  return analyse_merged(ptrs, top_n);
}

}  // namespace

TEST(LogAnalysis, PeakLeaksAndTotals) {
  gpumem_log l;
  l.alloc(0xa00, 100, 10)      // live 100
      .alloc(0xb00, 200, 20)   // 300
      .free(0xa00, 100, 30)    // 200
      .alloc(0xc00, 50, 40)    // 250
      .alloc(0xd00, 1000, 50)  // 1250  <- peak, event #4, line 6
      .free(0xd00, 1000, 60)   // 250
      .free(0xb00, 200, 70);   // 50: 0xc00 never freed
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
  ASSERT_EQ(s.live_at_end.size(), 1u);
  EXPECT_EQ(s.live_at_end[0].pointer, 0xc00u);
  EXPECT_EQ(s.live_at_end[0].size, 50u);
  EXPECT_EQ(s.live_at_end[0].at.line, 5u);
  EXPECT_EQ(s.first_time_ns, 10);
  EXPECT_EQ(s.last_time_ns, 70);
  ASSERT_EQ(s.timeline.size(), 7u);
  EXPECT_EQ(s.timeline[3].live, 250u);
  EXPECT_EQ(s.timeline[3].time_ns, 40);
  EXPECT_FALSE(s.peak_reserved_bytes);
}

// Pinned host memory is kept apart: it moves no device figure, and has its own.
TEST(LogAnalysis, PinnedHostMemoryIsKeptApartFromDeviceMemory) {
  gpumem_log l;
  l.alloc(0xa00, 100, 10)            // device live 100
      .host_alloc(0x7f00, 5000, 20)  // pinned 5000: no device peak
      .host_alloc(0x7f80, 300, 30)   // pinned 5300 <- its peak, line 4
      .host_free(0x7f00, 5000, 40)   // pinned 300
      .free(0xa00, 100, 50);         // device 0
  auto const s = summarize(l);
  EXPECT_EQ(s.events, 5u);
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.frees, 1u);
  EXPECT_EQ(s.bytes_allocated, 100u);
  EXPECT_EQ(s.peak_live_bytes, 100u);
  EXPECT_EQ(s.live_at_end_bytes, 0u);
  EXPECT_EQ(s.largest.size(), 1u);
  EXPECT_EQ(s.unknown_free_count, 0u);
  EXPECT_EQ(s.timeline.size(), 2u);  // the device's two events only
  EXPECT_EQ(s.host.allocations, 2u);
  EXPECT_EQ(s.host.frees, 1u);
  EXPECT_EQ(s.host.peak_live_bytes, 5300u);
  ASSERT_TRUE(s.host.peak_live_at);
  EXPECT_EQ(s.host.peak_live_at->line, 4u);
  EXPECT_EQ(s.host.live_at_end_bytes, 300u);
  EXPECT_EQ(s.host.live_at_end_count, 1u);
}

// Managed memory is kept apart too, its cudaFree told from a device one by its pointer.
TEST(LogAnalysis, ManagedMemoryIsKeptApartFromDeviceMemory) {
  gpumem_log l;
  l.alloc(0xa00, 100, 10)                                   // device live 100
      .managed_alloc(0x7000, 5000, 20)                      // managed 5000: no device peak
      .managed_alloc(0x8000, 300, 30, "cuMemAllocManaged")  // managed 5300 <- its peak, line 4
      .free(0x7000, 5000, 40)                               // cudaFree of a managed pointer: managed 300
      .managed_fail(1 << 30, 45)                            // no device failure
      .free(0xa00, 100, 50)                                 // device 0
      .free(0x7000, 5000, 60);                              // freed already: a device free, unknown
  auto const s = summarize(l);
  EXPECT_EQ(s.events, 7u);
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.frees, 2u);
  EXPECT_EQ(s.failures, 0u);
  EXPECT_TRUE(s.failed.empty());
  EXPECT_EQ(s.bytes_allocated, 100u);
  EXPECT_EQ(s.bytes_freed, 100u);
  EXPECT_EQ(s.peak_live_bytes, 100u);
  EXPECT_EQ(s.live_at_end_bytes, 0u);
  EXPECT_EQ(s.live_at_end_count, 0u);
  EXPECT_EQ(s.largest.size(), 1u);
  EXPECT_EQ(s.unknown_free_count, 1u);
  ASSERT_EQ(s.unknown_frees.size(), 1u);
  EXPECT_EQ(s.unknown_frees[0].at.line, 8u);
  EXPECT_EQ(s.timeline.size(), 3u);  // the device's three events only
  EXPECT_EQ(s.managed.allocations, 2u);
  EXPECT_EQ(s.managed.bytes_allocated, 5300u);
  EXPECT_EQ(s.managed.frees, 1u);
  EXPECT_EQ(s.managed.failures, 1u);
  EXPECT_EQ(s.managed.peak_live_bytes, 5300u);
  ASSERT_TRUE(s.managed.peak_live_at);
  EXPECT_EQ(s.managed.peak_live_at->line, 4u);
  EXPECT_EQ(s.managed.live_at_end_bytes, 300u);
  EXPECT_EQ(s.managed.live_at_end_count, 1u);
  EXPECT_FALSE(s.host.any());
}

// A merged pass sums the device's Reserved only: a pinned host row's is the host chain's.
TEST(LogAnalysis, CombinedReservedCountsDeviceRowsOnly) {
  std::string const header = "Action,Pointer,Size,TimeNs,Entry,Reserved\n";
  auto const m = merge({header + "allocate,0x100,10,1,cudaMalloc,1000\n" +
                            "allocate,0x7f00,10,2,cudaHostAlloc,900000\n" +
                            "allocate,0x200,10,3,cudaMallocManaged,800000\n",
                        header + "allocate,0x300,10,4,cudaMalloc,2000\n"});
  EXPECT_EQ(*m.logs[0].peak_reserved_bytes, 1000u);
  ASSERT_TRUE(m.combined && m.combined->peak_reserved_bytes);
  EXPECT_EQ(*m.combined->peak_reserved_bytes, 3000u);
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
  EXPECT_EQ(s.unknown_free_count, 2u);
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
  ASSERT_EQ(s.live_at_end.size(), 1u);
  EXPECT_EQ(s.live_at_end[0].size, 30u);
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
  // Every survivor is counted; the top_n largest are listed, largest first.
  EXPECT_EQ(s.live_at_end_count, 6u);
  ASSERT_EQ(s.live_at_end.size(), 3u);
  EXPECT_EQ(s.live_at_end[0].size, 9u);
  EXPECT_EQ(s.live_at_end[1].size, 9u);
  EXPECT_EQ(s.live_at_end[2].size, 7u);
  EXPECT_EQ(s.live_at_end_bytes, 34u);
}

TEST(LogAnalysis, TimedCallsAreSummedAndTheSlowestListedSlowestFirst) {
  gpumem_log l;
  l.took("")
      .alloc(0x100, 10, 1)  // served from the free lists: not timed
      .took("5000")
      .alloc(0x200, 20, 2)
      .took("300")
      .free(0x200, 20, 3)
      .took("70000")
      .fail(1ull << 40, 4)
      .took("5000")
      .host_alloc(0x900, 8, 5);  // kept apart from device memory, but its time counts
  auto const s = summarize(l, 3);
  EXPECT_EQ(s.timed_calls, 4u);
  EXPECT_EQ(s.timed_ns, 80300u);
  ASSERT_EQ(s.slowest.size(), 3u);
  EXPECT_EQ(s.slowest[0].duration_ns, 70000u);
  EXPECT_EQ(s.slowest[0].action, gpumem::log_action::allocate_failure);
  EXPECT_EQ(s.slowest[0].call.size, 1ull << 40);
  EXPECT_EQ(s.slowest[0].call.at.line, 5u);
  // Equal durations: the older first.
  EXPECT_EQ(s.slowest[1].duration_ns, 5000u);
  EXPECT_EQ(s.slowest[1].call.at.event_index, 1u);
  EXPECT_EQ(s.slowest[1].call.size, 20u);
  EXPECT_EQ(s.slowest[2].duration_ns, 5000u);
  EXPECT_EQ(s.slowest[2].call.at.event_index, 4u);
}

TEST(LogAnalysis, FailuresAndPerThreadPerStreamCounts) {
  gpumem_log l;
  l.alloc(0x100, 10, 1, 7, "0x1")
      .alloc(0x200, 20, 2, 8, "0x5000")
      .fail(1ull << 40, 3, 8)
      .free(0x100, 10, 4, 8, "0x5000")
      .fail(64, 5, 7, "CUDA_ERROR_INVALID_VALUE");
  auto const s = summarize(l);
  EXPECT_EQ(s.failures, 2u);
  ASSERT_EQ(s.failed.size(), 2u);
  EXPECT_EQ(s.failed[0].size, 1ull << 40);
  EXPECT_EQ(s.failed[0].thread, 8u);
  EXPECT_EQ(s.failed[0].at.line, 4u);
  EXPECT_EQ(s.failed[1].size, 64u);
  auto const& t = s.threads.rows;
  ASSERT_EQ(t.size(), 2u);
  EXPECT_FALSE(s.threads.truncated);
  EXPECT_EQ(t[0].key, 7u);
  EXPECT_EQ(t[0].allocations, 1u);
  EXPECT_EQ(t[0].failures, 1u);
  EXPECT_EQ(t[0].frees, 0u);
  EXPECT_EQ(t[1].key, 8u);
  EXPECT_EQ(t[1].allocations, 1u);
  EXPECT_EQ(t[1].frees, 1u);
  EXPECT_EQ(t[1].failures, 1u);
  EXPECT_EQ(t[1].bytes_allocated, 20u);
  auto const& st = s.streams.rows;
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].key, 1u);  // both failures logged on 0x1
  EXPECT_EQ(st[0].failures, 2u);
  EXPECT_EQ(st[1].key, 0x5000u);
  EXPECT_EQ(st[1].allocations, 1u);
  EXPECT_EQ(st[1].frees, 1u);
}

TEST(LogAnalysis, PeakReservedWhenTheLogHasIt) {
  auto const s = analyze(
      "Action,Pointer,Size,TimeNs,Reserved\n"
      "allocate,0x100,10,1,2097152\n"
      "allocate,0x200,10,2,4194304\n"
      "free,0x100,10,3,4194304\n"
      "free,0x200,10,4,2097152\n",
      "r.csv");
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
  auto const m = merge({r0.text(), r1.text()});
  ASSERT_EQ(m.logs.size(), 2u);
  EXPECT_EQ(m.logs[0].peak_live_bytes, 100u);
  EXPECT_EQ(m.logs[1].peak_live_bytes, 200u);
  ASSERT_TRUE(m.combined);
  auto const& c = *m.combined;
  EXPECT_EQ(c.logs, 2u);
  EXPECT_EQ(c.events, 5u);
  EXPECT_EQ(c.allocations, 3u);
  EXPECT_EQ(c.peak_live_bytes, 300u);
  EXPECT_EQ(c.peak_at.time_ns, 20);
  EXPECT_EQ(c.peak_log, 1u);
  EXPECT_EQ(c.peak_at.line, 2u);
  EXPECT_EQ(c.live_at_end_bytes, 5u);
  EXPECT_EQ(c.live_at_end_count, 1u);
  EXPECT_TRUE(c.complete);
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
  auto const c = *merge({r0.text(), r1.text()}).combined;
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
  auto const s = analyze(
      "Action,Pointer,Size,TimeNs,Device\n"
      "allocate,0x100,10,1,0\n"
      "allocate,0x200,20,2,1\n"
      "free,0x100,10,3,0\n"
      "allocate,0x300,30,4,1\n",
      "d.csv");
  auto const& d = s.devices.rows;
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].key, 0u);
  EXPECT_EQ(d[0].allocations, 1u);
  EXPECT_EQ(d[0].frees, 1u);
  EXPECT_EQ(d[1].key, 1u);
  EXPECT_EQ(d[1].allocations, 2u);
  EXPECT_EQ(d[1].bytes_allocated, 50u);
  EXPECT_EQ(s.peak_live_bytes, 50u);  // live bytes are summed over the devices
  auto const rmm = analyze("Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00,allocate,0x1,8,0\n", "r");
  EXPECT_TRUE(rmm.devices.rows.empty());
}

TEST(LogAnalysis, FailureAndUnknownFreeListsAreBoundedButCountedExactly) {
  gpumem_log l;
  for (int i = 0; i < 20; ++i) l.fail(1000 + i, i).free(0x9000 + i, 8, i);
  auto const s = summarize(l, 3);
  EXPECT_EQ(s.failures, 20u);
  ASSERT_EQ(s.failed.size(), 3u);
  EXPECT_EQ(s.failed[2].size, 1002u);  // the first ones, in log order
  EXPECT_EQ(s.unknown_free_count, 20u);
  EXPECT_EQ(s.unknown_frees.size(), 3u);
}

TEST(LogAnalysis, KeyTablesAreBoundedAndCountTheRestAsOthers) {
  gpumem_log l;
  for (std::uint64_t t = 0; t < key_table::max_rows + 500; ++t) l.alloc(0x1000 + t * 0x100, 8, 1, 100 + t);
  auto const s = summarize(l);
  EXPECT_EQ(s.threads.rows.size(), key_table::max_rows);
  EXPECT_TRUE(s.threads.truncated);
  EXPECT_EQ(s.threads.others.allocations, 500u);
  EXPECT_EQ(s.threads.others.bytes_allocated, 4000u);
  EXPECT_FALSE(s.streams.truncated);
}

TEST(LogAnalysis, HugeSizesSaturateInsteadOfWrapping) {
  gpumem_log l;
  std::uint64_t const top = ~std::uint64_t{0};
  l.alloc(0x1000, top, 1).alloc(0x2000, std::uint64_t{1} << 63, 2).free(0x2000, 0, 3);
  auto const s = summarize(l);
  EXPECT_EQ(s.peak_live_bytes, top);    // 2^64 - 1 + 2^63 does not fit: held at the top
  EXPECT_EQ(s.live_at_end_bytes, top);  // and the free brings it back exactly
  EXPECT_EQ(s.bytes_allocated, top);
  ASSERT_EQ(s.histogram.size(), 1u);
  EXPECT_EQ(s.histogram[0].lo, std::uint64_t{1} << 63);
  EXPECT_EQ(s.histogram[0].hi, top);
  EXPECT_EQ(s.histogram[0].count, 2u);
}

TEST(LogAnalysis, AnIncompleteLogIsNotComplete) {
  std::string text = gpumem_log{}.alloc(0x100, 10, 1).text() + "#gpumem incomplete,dropped_rows=3,reason=disk full\n";
  auto const s = analyze(text, "i.csv");
  EXPECT_FALSE(s.complete());
  ASSERT_TRUE(s.incomplete);
  EXPECT_EQ(s.incomplete->dropped_rows, 3u);
  EXPECT_EQ(s.live_at_end_count, 1u);  // still listed, as live at the end
  EXPECT_TRUE(analyze(gpumem_log{}.alloc(0x100, 10, 1).text(), "c.csv").complete());
}

TEST(TimelineBuilder, AMillionPointsStayWithinSixPerBucketAndKeepThePeak) {
  timeline_builder b{256};
  for (std::int64_t i = 0; i < 1'000'000; ++i) {
    b.add({i * 7, static_cast<std::uint64_t>((i * 7919) % 1000), static_cast<std::int64_t>(2000 + i % 3), 0});
  }
  b.add({7'000'000, 123'456, 999'999, 0});  // the peak of both series, last
  auto const pts = b.points();
  EXPECT_LE(pts.size(), 6u * 256u);
  EXPECT_GE(pts.size(), 256u);
  EXPECT_EQ(pts.front().time_ns, 0);
  EXPECT_EQ(pts.back().live, 123'456u);
  EXPECT_EQ(pts.back().reserved, 999'999);
  for (std::size_t i = 1; i < pts.size(); ++i) ASSERT_LE(pts[i - 1].time_ns, pts[i].time_ns);
  bool low = false;
  for (auto const& p : pts) low = low || p.live == 0;
  EXPECT_TRUE(low);  // troughs survive too
}

TEST(TimelineBuilder, AnOlderTimeIsHeldAtThePreviousOne) {
  timeline_builder b;
  b.add({100, 1, -1, 0});
  b.add({90, 2, -1, 0});  // a racing thread's row
  auto const pts = b.points();
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[1].time_ns, 100);
  EXPECT_EQ(pts[1].live, 2u);
}
