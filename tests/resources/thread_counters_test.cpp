// thread_counters: exact sums across many threads, including threads that exited,
// slot numbers reused after an owner is destroyed, and the shared fallback once the
// process's slots are all taken.
#include <gpumem/detail/thread_counters.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace gpumem::detail {
namespace {

TEST(ThreadCounters, SumsEveryThreadIncludingThoseThatExited) {
  thread_counters c{2};
  constexpr int threads = 8;
  constexpr int adds = 10000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < adds; ++i) {
        c.add(0);
        c.add(1, 3);
      }
    });
  }
  for (auto& t : pool) t.join();  // every block retired: the values live on in the totals
  c.add(0);                       // and this thread's own block
  EXPECT_EQ(c.get(0), std::uint64_t{threads} * adds + 1);
  EXPECT_EQ(c.get(1), std::uint64_t{threads} * adds * 3);
}

TEST(ThreadCounters, ReadsWhileThreadsCountAndExit) {
  thread_counters c{1};
  std::vector<std::thread> pool;
  std::uint64_t last = 0;
  for (int round = 0; round < 20; ++round) {
    pool.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) c.add(0);
    });
    std::uint64_t const now = c.get(0);
    EXPECT_GE(now, last);  // never counted twice as a thread retires, so never falls back
    last = now;
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(c.get(0), 20000u);
}

TEST(ThreadCounters, ANewOwnerOfReleasedSlotsStartsAtZero) {
  {
    thread_counters a{4};
    for (std::size_t i = 0; i < 4; ++i) a.add(i, 7);
    std::thread([&] { a.add(0, 5); }).join();
  }
  thread_counters b{4};  // may take the same slot numbers
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(b.get(i), 0u);
  b.add(2);
  EXPECT_EQ(b.get(2), 1u);
}

TEST(ThreadCounters, FallsBackToSharedTotalsWhenSlotsRunOut) {
  std::vector<std::unique_ptr<thread_counters>> hogs;
  for (std::size_t i = 0; i < thread_counters::slots_per_thread; ++i) {
    hogs.push_back(std::make_unique<thread_counters>(1));
  }
  thread_counters late{3};  // no slot left for it
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) late.add(1, 2);
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(late.get(1), 8000u);
  EXPECT_EQ(late.get(0), 0u);
  late.reset();
  EXPECT_EQ(late.get(1), 0u);
}

TEST(ThreadCounters, ResetClearsEveryThreadsPart) {
  thread_counters c{1};
  c.add(0, 10);
  std::thread([&] { c.add(0, 5); }).join();
  c.reset();
  EXPECT_EQ(c.get(0), 0u);
  c.add(0);
  EXPECT_EQ(c.get(0), 1u);
}

}  // namespace
}  // namespace gpumem::detail
