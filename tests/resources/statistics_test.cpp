// statistics_resource_adaptor: exact counters after known sequences.

#include <gpumem/statistics_resource_adaptor.hpp>

#include <support/host_test_resource.hpp>

#include <gtest/gtest.h>

#include <barrier>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

using counters = statistics_resource_adaptor::counters;

void expect_counters(counters c, std::int64_t current, std::int64_t peak, std::int64_t total) {
  EXPECT_EQ(c.current, current);
  EXPECT_EQ(c.peak, peak);
  EXPECT_EQ(c.total, total);
}

TEST(StatisticsAdaptor, CountsAKnownSequence) {
  test::host_test_resource up;
  statistics_resource_adaptor stats{&up};
  EXPECT_EQ(stats.get_upstream(), &up);
  void* a = stats.allocate(100);
  void* b = stats.allocate(200);
  void* c = stats.allocate(300);
  expect_counters(stats.bytes(), 600, 600, 600);
  stats.deallocate(b, 200);
  void* d = stats.allocate(50);
  expect_counters(stats.bytes(), 450, 600, 650);
  expect_counters(stats.allocations(), 3, 3, 4);
  EXPECT_EQ(stats.deallocations(), 1);
  stats.deallocate(a, 100);
  stats.deallocate(c, 300);
  stats.deallocate(d, 50);
  expect_counters(stats.bytes(), 0, 600, 650);
  expect_counters(stats.allocations(), 0, 3, 4);
  EXPECT_EQ(stats.deallocations(), 4);
  EXPECT_EQ(stats.failed_allocations(), 0);
  EXPECT_EQ(up.live_count(), 0u);
}

TEST(StatisticsAdaptor, ZeroBytesAndNullAreForwardedButNotCounted) {
  test::host_test_resource up;
  statistics_resource_adaptor stats{&up};
  EXPECT_EQ(stats.allocate(0), nullptr);
  stats.deallocate(nullptr, 0);
  EXPECT_EQ(up.allocate_calls(), 1);
  EXPECT_EQ(up.deallocate_calls(), 1);
  expect_counters(stats.allocations(), 0, 0, 0);
  EXPECT_EQ(stats.deallocations(), 0);
}

TEST(StatisticsAdaptor, FailuresAreCountedAndPropagatedUnchanged) {
  test::host_test_resource up;
  statistics_resource_adaptor stats{&up};
  up.fail_with(CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_THROW((void)stats.allocate(1024), out_of_memory);
  up.fail_with(CUDA_ERROR_ILLEGAL_ADDRESS);
  try {
    (void)stats.allocate(1024);
    FAIL() << "expected cuda_error";
  } catch (cuda_error const& e) { EXPECT_EQ(e.code(), CUDA_ERROR_ILLEGAL_ADDRESS); }
  EXPECT_EQ(stats.failed_allocations(), 2);
  expect_counters(stats.bytes(), 0, 0, 0);
  expect_counters(stats.allocations(), 0, 0, 0);
}

TEST(StatisticsAdaptor, ForwardsReleaseInfoAndStreamDestroyed) {
  test::host_test_resource up;
  statistics_resource_adaptor stats{&up};
  void* p = stats.allocate(4096);
  EXPECT_EQ(stats.info().used_bytes, 4096u);
  (void)stats.release();
  stats.stream_destroyed(stream_ref{reinterpret_cast<CUstream>(0x1234)});
  EXPECT_EQ(up.release_calls(), 1);
  EXPECT_EQ(up.stream_destroyed_calls(), 1);
  stats.deallocate(p, 4096);
}

TEST(StatisticsAdaptor, NullUpstreamIsALogicError) { EXPECT_THROW(statistics_resource_adaptor{nullptr}, logic_error); }

TEST(StatisticsAdaptor, ConcurrentThreadsKeepExactTotals) {
  test::host_test_resource up;
  statistics_resource_adaptor stats{&up};
  constexpr int threads = 8;
  constexpr int iterations = 2000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&stats, t] {
      for (int i = 0; i < iterations; ++i) {
        auto const bytes = static_cast<std::size_t>(256 * (t + 1));
        void* p = stats.allocate(bytes);
        stats.deallocate(p, bytes);
      }
    });
  }
  for (auto& th : pool) th.join();
  auto const b = stats.bytes();
  EXPECT_EQ(b.current, 0);
  EXPECT_EQ(b.total, 256 * iterations * (threads * (threads + 1) / 2));
  EXPECT_GE(b.peak, 256 * threads);                        // the largest single request
  EXPECT_LE(b.peak, 256 * (threads * (threads + 1) / 2));  // all threads at once
  auto const a = stats.allocations();
  EXPECT_EQ(a.current, 0);
  EXPECT_EQ(a.total, threads * iterations);
  EXPECT_GE(a.peak, 1);
  EXPECT_LE(a.peak, threads);
  EXPECT_EQ(stats.deallocations(), threads * iterations);
}

// Below a pool the adaptor shares every change: the peak of allocations held by
// many threads at once is then exact, not within a step per thread.
TEST(StatisticsAdaptor, EveryChangeSharingGivesTheExactPeakAcrossThreads) {
  test::host_test_resource up;
  statistics_resource_adaptor stats{&up, statistics_resource_adaptor::sharing::every_change};
  constexpr int threads = 8;
  constexpr int holds = 9;               // odd: in steps of 4 MiB, each thread would keep 3 MiB unshared
  constexpr std::size_t size = 3 << 20;  // below the 4 MiB step of sharing::in_steps
  std::barrier all_held{threads};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      std::vector<void*> held;
      for (int i = 0; i < holds; ++i) held.push_back(stats.allocate(size));
      all_held.arrive_and_wait();
      for (void* p : held) stats.deallocate(p, size);
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(stats.bytes().peak, static_cast<std::int64_t>(threads * holds * size));
  EXPECT_EQ(stats.allocations().peak, threads * holds);
  EXPECT_EQ(stats.bytes().current, 0);
  EXPECT_EQ(stats.current_bytes_estimate(), 0);
}

}  // namespace
}  // namespace gpumem
