// peak_gauge: exact value and peak in one thread; with many threads an exact value
// and a peak within the documented bound, including threads that exit holding a
// part, parts published and unpublished, and the shared fallback.
#include <gpumem/detail/peak_gauge.hpp>

#include <gtest/gtest.h>

#include <barrier>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace gpumem::detail {
namespace {

constexpr std::int64_t step = 1000;

TEST(PeakGauge, OneThreadIsExactAcrossSteps) {
  peak_gauge g{step};
  std::int64_t value = 0;
  std::int64_t peak = 0;
  // Changes below, at and above the step, up and down.
  for (std::int64_t v : {10, 990, 1, -500, 2500, -3000, 999, 1000, -1, -1998, 4000}) {
    g.add(v);
    value += v;
    peak = std::max(peak, value);
    ASSERT_EQ(g.current(), value);
    ASSERT_EQ(g.estimate(), value);
    ASSERT_EQ(g.peak(), peak);
  }
}

TEST(PeakGauge, APartAnotherThreadLowersIsNotCountedTwice) {
  peak_gauge g{step};
  std::thread([&] { g.add(10 * step + 7); }).join();  // published, then retired
  EXPECT_EQ(g.estimate(), 10 * step + 7);
  std::thread([&] { g.add(-(10 * step + 7)); }).join();
  EXPECT_EQ(g.current(), 0);
  EXPECT_EQ(g.estimate(), 0);
  g.add(5);
  EXPECT_EQ(g.peak(), 10 * step + 7);
  EXPECT_EQ(g.estimate(), 5);
}

TEST(PeakGauge, ExitedThreadsPartsStayInTheEstimate) {
  peak_gauge g{step};
  constexpr int threads = 6;
  std::vector<std::thread> pool;
  // Half the threads leave an unpublished part (below the step), half a published one.
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&g, t] { g.add(t % 2 == 0 ? step - 1 : 3 * step); });
  }
  for (auto& t : pool) t.join();
  std::int64_t const held = (threads / 2) * (step - 1) + (threads / 2) * 3 * step;
  EXPECT_EQ(g.current(), held);
  EXPECT_EQ(g.estimate(), held);
  g.add(1);  // this thread alone changes it now: the peak is exact again
  EXPECT_EQ(g.peak(), held + 1);
}

TEST(PeakGauge, ManyThreadsHoldingAtOnceGiveAPeakWithinTheBound) {
  peak_gauge g{step};
  constexpr int threads = 8;
  constexpr int adds = 50;
  constexpr std::int64_t size = 137;  // several steps per thread, never aligned to one
  std::barrier all_held{threads};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < adds; ++i) g.add(size);
      all_held.arrive_and_wait();  // the true peak: everything held at once
      for (int i = 0; i < adds; ++i) g.add(-size);
    });
  }
  for (auto& t : pool) t.join();
  std::int64_t const true_peak = threads * adds * size;
  EXPECT_EQ(g.current(), 0);
  EXPECT_EQ(g.estimate(), 0);
  EXPECT_GE(g.peak(), true_peak - (threads - 1) * step);
  EXPECT_LE(g.peak(), true_peak + (threads - 1) * step);
}

TEST(PeakGauge, ProducersAndConsumersKeepTheValueExact) {
  // One thread's increases undone by another: each thread's part drifts without
  // bound, up on one side and down on the other; the sum stays exact.
  peak_gauge g{step};
  constexpr int pairs = 4;
  constexpr int items = 20000;
  std::vector<std::thread> pool;
  std::vector<std::unique_ptr<std::atomic<int>>> made;
  for (int p = 0; p < pairs; ++p) made.push_back(std::make_unique<std::atomic<int>>(0));
  for (int p = 0; p < pairs; ++p) {
    pool.emplace_back([&, p] {
      for (int i = 0; i < items; ++i) {
        g.add(64);
        made[p]->fetch_add(1, std::memory_order_release);
      }
    });
    pool.emplace_back([&, p] {
      for (int taken = 0; taken < items;) {
        if (made[p]->load(std::memory_order_acquire) > taken) {
          g.add(-64);
          ++taken;
        }
      }
    });
  }
  std::int64_t last_peak = 0;
  for (int i = 0; i < 100; ++i) {
    auto const now = g.current();
    EXPECT_GE(now, 0);
    EXPECT_LE(now, std::int64_t{pairs} * items * 64);
    auto const peak = g.peak();
    EXPECT_GE(peak, last_peak);  // never goes down
    last_peak = peak;
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(g.current(), 0);
  EXPECT_EQ(g.estimate(), 0);
  EXPECT_LE(g.peak(), std::int64_t{pairs} * items * 64 + (2 * pairs) * step);
}

TEST(PeakGauge, WithoutSlotsEveryAddIsSharedAndExact) {
  std::vector<std::unique_ptr<thread_counters>> hogs;
  for (std::size_t i = 0; i < thread_counters::slots_per_thread; ++i) {
    hogs.push_back(std::make_unique<thread_counters>(1));
  }
  peak_gauge g{step};  // no slot left for it
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) g.add(3);
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(g.current(), 12000);
  EXPECT_EQ(g.estimate(), 12000);
  EXPECT_EQ(g.peak(), 12000);
  g.add(-12000);
  EXPECT_EQ(g.current(), 0);
  EXPECT_EQ(g.peak(), 12000);
}

}  // namespace
}  // namespace gpumem::detail
