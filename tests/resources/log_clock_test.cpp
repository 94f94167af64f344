// log_clock: cycle-counter stamps converted to wall-clock starts and durations.
// Bounds only (a row's time lies between clock readings taken around it), never
// a speed: nothing here depends on how fast the machine is.

#include <gpumem/detail/log_clock.hpp>
#include <gpumem/detail/os_thread.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace gpumem::detail {
namespace {

// The rate is calibrated over 100 us at first (about 0.1%): 1 ms covers the
// error of a start up to a second away from its thread's anchor many times over.
constexpr std::int64_t slack_ns = 1'000'000;

TEST(LogClock, PicksASourceAndTicksNeverGoBack) {
  auto const a = log_ticks();
  auto const b = log_ticks();
  EXPECT_NE(log_tick_source(), tick_source::unknown);
  EXPECT_GE(b, a);
#if defined(__aarch64__)
  EXPECT_EQ(log_tick_source(), tick_source::cycle_counter);
#endif
}

TEST(LogClock, StartLiesBetweenTheWallClockReadingsAroundIt) {
  for (int i = 0; i < 1000; ++i) {
    auto const before = realtime_ns();
    auto const start = log_ticks();
    auto const when = log_row_time(start, log_ticks());
    auto const after = realtime_ns();
    ASSERT_GE(when.start_ns, before - slack_ns) << i;
    ASSERT_LE(when.start_ns, after + slack_ns) << i;
    ASSERT_LE(when.duration_ns, static_cast<std::uint64_t>(after - before) + 1000) << i;
  }
}

TEST(LogClock, DurationCoversASleepAndNoMore) {
  auto const m0 = monotonic_ns();
  auto const start = log_ticks();
  std::this_thread::sleep_for(std::chrono::milliseconds{3});
  auto const when = log_row_time(start, log_ticks());
  auto const m1 = monotonic_ns();
  EXPECT_GE(when.duration_ns, 2'900'000U);  // 3 ms, less 0.1% and rounding
  EXPECT_LE(when.duration_ns, static_cast<std::uint64_t>(m1 - m0) + 10'000);
}

// Each thread has its own anchor; a start taken on one thread and converted on
// another still lands between the readings.
TEST(LogClock, ThreadsAndAStartFromAnotherThread) {
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        auto const before = realtime_ns();
        auto const start = log_ticks();
        std::int64_t start_ns = 0;
        std::thread other{[&] { start_ns = log_row_time(start, log_ticks()).start_ns; }};
        other.join();
        auto const after = realtime_ns();
        if (start_ns < before - slack_ns || start_ns > after + slack_ns) bad.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(LogClock, ForkedChildKeepsTheClock) {
  auto const start = log_ticks();
  auto const before = realtime_ns();
  pid_t const pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto const when = log_row_time(start, log_ticks());
    auto const after = realtime_ns();
    ::_exit(when.start_ns <= after + slack_ns && when.start_ns >= before - 2 * slack_ns ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace gpumem::detail
