// spin_mutex: mutual exclusion under contention, try_lock, and waiters that outlast
// a long critical section (they back off to sleeping, and still get the lock).
#include <gpumem/detail/spin_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace gpumem::detail {
namespace {

TEST(SpinMutex, ExcludesUnderContention) {
  spin_mutex m;
  // Read and written separately (never one atomic increment): only the lock keeps
  // the increments whole and the holders alone.
  std::atomic<long> counter{0};
  std::atomic<int> inside{0};
  std::atomic<bool> overlap{false};
  constexpr int threads = 8;
  constexpr int rounds = 20000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        std::lock_guard lock{m};
        int const now = inside.load(std::memory_order_relaxed) + 1;
        inside.store(now, std::memory_order_relaxed);
        if (now != 1) overlap.store(true, std::memory_order_relaxed);
        counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        inside.store(inside.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_FALSE(overlap);
  EXPECT_EQ(counter.load(), long{threads} * rounds);
}

TEST(SpinMutex, TryLockFailsWhileHeldAndSucceedsAfter) {
  spin_mutex m;
  ASSERT_TRUE(m.try_lock());
  bool other = true;
  std::thread([&] { other = m.try_lock(); }).join();
  EXPECT_FALSE(other);
  m.unlock();
  std::thread([&] {
    other = m.try_lock();
    if (other) m.unlock();
  }).join();
  EXPECT_TRUE(other);
}

TEST(SpinMutex, WaitersGetTheLockAfterALongHold) {
  // A holder making a slow driver call: the waiters go past spinning and yielding
  // to sleeping, and each still takes the lock once it is free.
  spin_mutex m;
  std::atomic<int> acquired{0};
  m.lock();
  std::vector<std::thread> waiters;
  for (int t = 0; t < 4; ++t) {
    waiters.emplace_back([&] {
      std::lock_guard lock{m};
      acquired.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(acquired.load(), 0);
  m.unlock();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(acquired.load(), 4);
}

}  // namespace
}  // namespace gpumem::detail
