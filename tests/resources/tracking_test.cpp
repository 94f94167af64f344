// tracking_resource_adaptor: records, ordering, leak report text, unknown frees,
// stacks, and many threads at once.

#include <gpumem/call_context.hpp>
#include <gpumem/diagnostics.hpp>
#include <gpumem/tracking_resource_adaptor.hpp>

#include <support/host_test_resource.hpp>
#include <support/stderr_capture.hpp>

#include <gtest/gtest.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

stream_ref stream(std::uintptr_t h) { return stream_ref{reinterpret_cast<CUstream>(h)}; }

std::vector<std::string> lines(std::string const& s) {
  std::vector<std::string> out;
  std::istringstream in{s};
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(TrackingAdaptor, RecordsEachOutstandingAllocation) {
  test::host_test_resource up;
  tracking_resource_adaptor track{&up};
  auto const tid = static_cast<std::uint64_t>(::syscall(SYS_gettid));
  void* a = nullptr;
  {
    scoped_call_context ctx{"cudaMalloc", 3};
    a = track.allocate(1000, stream(0x1));
  }
  void* b = track.allocate(3 << 20, stream(0x77));
  EXPECT_EQ(track.outstanding_count(), 2u);
  EXPECT_EQ(track.outstanding_bytes(), 1000u + (3u << 20));

  auto const recs = track.outstanding();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].ptr, a);
  EXPECT_EQ(recs[0].bytes, 1000u);
  EXPECT_EQ(recs[0].stream, 0x1u);
  EXPECT_EQ(recs[0].thread_id, tid);
  EXPECT_STREQ(recs[0].entry_point, "cudaMalloc");
  EXPECT_EQ(recs[0].device, 3);
  EXPECT_TRUE(recs[0].stack.empty());
  EXPECT_EQ(recs[1].ptr, b);
  EXPECT_STREQ(recs[1].entry_point, "allocate");
  EXPECT_EQ(recs[1].device, -1);
  EXPECT_EQ(recs[1].stream, 0x77u);
  EXPECT_LE(recs[0].time_ns, recs[1].time_ns);

  track.deallocate(a, 1000, stream(0x1));
  EXPECT_EQ(track.outstanding_count(), 1u);
  EXPECT_EQ(track.outstanding_bytes(), 3u << 20);
  track.deallocate(b, 3 << 20);
  EXPECT_EQ(track.outstanding_count(), 0u);
  EXPECT_EQ(track.unknown_deallocations(), 0u);
  EXPECT_EQ(up.live_count(), 0u);
}

TEST(TrackingAdaptor, LeakReportListsOldestFirstAndTruncates) {
  test::host_test_resource up;
  tracking_resource_adaptor track{&up};
  std::vector<void*> ptrs;
  for (std::size_t i = 1; i <= 5; ++i) ptrs.push_back(track.allocate(i * 1024, stream(0x2)));
  void* big = track.allocate(2u << 20);
  auto const report = track.leak_report(3);
  auto const l = lines(report);
  ASSERT_EQ(l.size(), 5u) << report;  // total, 3 rows, "... and 3 more"
  EXPECT_EQ(l[0], "gpumem: 6 outstanding allocations, " + std::to_string(15 * 1024 + (2 << 20)) + " B (2 MiB)");
  for (std::size_t i = 0; i < 3; ++i) {
    std::ostringstream ptr;
    ptr << ptrs[i];
    EXPECT_EQ(l[i + 1].rfind("  " + ptr.str() + "  " + std::to_string((i + 1) * 1024) + " B  stream 0x2  thread ", 0),
              0u)
        << l[i + 1];
    EXPECT_NE(l[i + 1].find("  device -1  allocate  at "), std::string::npos) << l[i + 1];
  }
  EXPECT_EQ(l[4], "  ... and 3 more");
  EXPECT_EQ(lines(track.leak_report()).size(), 7u);  // default 20 rows: all 6 fit

  for (std::size_t i = 0; i < ptrs.size(); ++i) track.deallocate(ptrs[i], (i + 1) * 1024, stream(0x2));
  track.deallocate(big, 2u << 20);
  EXPECT_EQ(track.leak_report(), "gpumem: 0 outstanding allocations, 0 B\n");
}

TEST(TrackingAdaptor, UnknownPointerIsCountedAndForwardedNotFatal) {
  test::host_test_resource up;
  tracking_resource_adaptor track{&up};
  alignas(256) static char not_ours[256];
  track.deallocate(not_ours, 256);
  track.deallocate(not_ours, 256);  // reported once, counted twice
  EXPECT_EQ(track.unknown_deallocations(), 2u);
  EXPECT_EQ(up.unknown_frees(), 2);  // forwarded: the upstream decides
  void* p = track.allocate(512);
  track.deallocate(p, 512);
  track.deallocate(p, 512);  // double free
  EXPECT_EQ(track.unknown_deallocations(), 3u);
  track.deallocate(nullptr, 0);
  EXPECT_EQ(track.unknown_deallocations(), 3u);
}

TEST(TrackingAdaptor, UnknownPointerAndWrongSizeAreSaidAtDebugLevel) {
  test::host_test_resource up;
  tracking_resource_adaptor track{&up};
  alignas(256) static char not_ours[256];
  log_level const saved = current_log_level();
  set_log_level(log_level::debug);
  test::stderr_capture err;
  track.deallocate(not_ours, 256);
  track.deallocate(not_ours, 256);  // once per pointer
  void* p = track.allocate(512);
  track.deallocate(p, 256);
  set_log_level(log_level::info);  // below debug: nothing more
  alignas(256) static char also_not_ours[256];
  track.deallocate(also_not_ours, 256);
  set_log_level(saved);
  std::string const text = err.text();
  auto const said = lines(text);
  ASSERT_EQ(said.size(), 2U) << text;
  EXPECT_NE(said[0].find("gpumem: tracking_resource_adaptor: deallocate of unknown pointer"), std::string::npos);
  EXPECT_NE(said[0].find("(256 bytes)"), std::string::npos);
  EXPECT_NE(said[1].find("freed with size 256, allocated with 512"), std::string::npos);
}

TEST(TrackingAdaptor, CapturesStacksWhenAsked) {
  test::host_test_resource up;
  tracking_resource_adaptor track{&up, true};
  void* p = track.allocate(256);
  auto const recs = track.outstanding();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_GE(recs[0].stack.size(), 2u);
  EXPECT_LE(recs[0].stack.size(), static_cast<std::size_t>(tracking_resource_adaptor::max_stack_depth));
  auto const l = lines(track.leak_report());
  EXPECT_EQ(l.size(), 2 + recs[0].stack.size());  // total, row, one line per frame
  track.deallocate(p, 256);
}

TEST(TrackingAdaptor, FailedAllocationsAreNotRecorded) {
  test::host_test_resource up;
  tracking_resource_adaptor track{&up};
  up.fail_with(CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_THROW((void)track.allocate(1024), out_of_memory);
  EXPECT_EQ(track.allocate(0), nullptr);
  EXPECT_EQ(track.outstanding_count(), 0u);
}

TEST(TrackingAdaptor, ManyThreadsAtOnce) {
  test::host_test_resource up;
  tracking_resource_adaptor track{&up};
  constexpr int threads = 8;
  constexpr int per_thread = 1000;
  std::vector<std::vector<void*>> held(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) held[static_cast<std::size_t>(t)].push_back(track.allocate(256));
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(track.outstanding_count(), static_cast<std::size_t>(threads * per_thread));
  EXPECT_EQ(track.outstanding_bytes(), static_cast<std::size_t>(threads * per_thread * 256));
  pool.clear();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (void* p : held[static_cast<std::size_t>(t)]) track.deallocate(p, 256);
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(track.outstanding_count(), 0u);
  EXPECT_EQ(track.unknown_deallocations(), 0u);
}

}  // namespace
}  // namespace gpumem
