// peak_gauge's mark: a high-water that restarts (reset_mark) while the peak stays
// whole, in one thread exactly and with many threads within the gauge's bound; and
// the statistics adaptor's bytes_mark() over it (what the shim's release at
// synchronizations and the default pool's resettable highs read).
#include <gpumem/detail/peak_gauge.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>

#include "support/host_test_resource.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace gpumem::detail {
namespace {

constexpr std::int64_t step = 1000;

TEST(PeakGaugeMark, FollowsThePeakUntilRestartedThenTheValuesSince) {
  peak_gauge g{step};
  std::int64_t value = 0;
  std::int64_t peak = 0;
  std::int64_t mark = 0;
  auto const add = [&](std::int64_t v) {
    g.add(v);
    value += v;
    peak = std::max(peak, value);
    mark = std::max(mark, value);
    ASSERT_EQ(g.mark(), mark);
    ASSERT_EQ(g.peak(), peak);
  };
  for (std::int64_t v : {10, 990, 2500, -3000, 999}) add(v);
  EXPECT_EQ(g.reset_mark(), 3500);  // the mark it replaces
  mark = value;
  EXPECT_EQ(g.mark(), value);
  EXPECT_EQ(g.peak(), 3500);  // untouched
  for (std::int64_t v : {1, -400, 2000, -1999, 7000, -6000}) add(v);
  EXPECT_EQ(g.reset_mark(), 8101);
  mark = value;
  add(-99);  // a decrease leaves the mark where the restart put it
  EXPECT_EQ(g.mark(), 2101);
  EXPECT_EQ(g.peak(), 8101);
}

TEST(PeakGaugeMark, NeverAbovePeakNorBelowTheValueWithManyThreads) {
  peak_gauge g{step};
  constexpr int threads = 4;
  constexpr int rounds = 20000;
  std::vector<std::thread> ts;
  std::atomic<bool> stop{false};
  // A thread restarting the mark while the others add and take back.
  std::thread restarter([&] {
    while (!stop.load()) {
      (void)g.reset_mark();
      std::this_thread::yield();
    }
  });
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        std::int64_t const v = 1 + (i + t) % (3 * step);
        g.add(v);
        g.add(-v);
      }
      g.add(5 * step);  // left held
    });
  }
  for (auto& t : ts) t.join();
  stop.store(true);
  restarter.join();
  auto const r = g.read();
  EXPECT_EQ(r.current, threads * 5 * step);
  EXPECT_LE(g.mark(), r.peak);
  EXPECT_GE(g.mark(), r.current - threads * step);
  // After a restart by a thread that sees the whole value: exactly it.
  (void)g.reset_mark();
  EXPECT_EQ(g.mark(), g.estimate());
  EXPECT_EQ(g.peak(), r.peak);
}

TEST(StatisticsMark, RestartsWithoutLoweringThePeakTheReportPrints) {
  test::host_test_resource upstream;
  statistics_resource_adaptor stats{&upstream};
  void* a = stats.allocate(4096);
  void* b = stats.allocate(8192);
  stats.deallocate(b, 8192);
  EXPECT_EQ(stats.bytes_mark(), 4096 + 8192);
  EXPECT_EQ(stats.reset_bytes_mark(), 4096 + 8192);
  EXPECT_EQ(stats.bytes_mark(), 4096);
  EXPECT_EQ(stats.bytes().peak, 4096 + 8192);
  void* c = stats.allocate(256);
  EXPECT_EQ(stats.bytes_mark(), 4096 + 256);
  stats.deallocate(c, 256);
  stats.deallocate(a, 4096);
  EXPECT_EQ(stats.bytes().peak, 4096 + 8192);
  EXPECT_EQ(stats.bytes().current, 0);
}

}  // namespace
}  // namespace gpumem::detail
