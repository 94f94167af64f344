// slow_work: what counts (a driver call, a wait for a lock another thread holds, the
// pool's slow path) and what does not (allocate+free pairs the free lists serve), on
// the simulated device. The allocation log times a call only when the count moved.

#include <gpumem/binning_memory_resource.hpp>
#include <gpumem/call_context.hpp>
#include <gpumem/cuda_memory_resource.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/slow_work.hpp>
#include <gpumem/detail/spin_mutex.hpp>
#include <gpumem/pool_memory_resource.hpp>

#include <support/sim_control.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <thread>

namespace gpumem {
namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

class SlowWork : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::sim_control::get().present() || !detail::driver_available()) {
      GTEST_SKIP() << "needs the simulated device";
    }
    ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
  }
  cuda_memory_resource cuda_;
};

TEST_F(SlowWork, EveryDriverCallThroughTheTableCounts) {
  auto const& d = detail::driver();
  std::uint32_t const before = detail::slow_work_count();
  CUcontext ctx = nullptr;
  ASSERT_EQ(d.cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  EXPECT_EQ(detail::slow_work_count(), before + 1);
  int version = 0;
  ASSERT_EQ(d.cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(detail::slow_work_count(), before + 2);
  // Per thread: another thread's calls leave this thread's count alone.
  std::thread{[&] {
    CUcontext c = nullptr;
    static_cast<void>(d.cuCtxGetCurrent(&c));
  }}.join();
  EXPECT_EQ(detail::slow_work_count(), before + 2);
}

TEST_F(SlowWork, AContendedSpinMutexCountsAnUncontendedOneDoesNot) {
  detail::spin_mutex m;
  std::uint32_t const before = detail::slow_work_count();
  m.lock();
  m.unlock();
  EXPECT_EQ(detail::slow_work_count(), before);
  m.lock();
  std::atomic<std::uint32_t> waiter_count{0};
  std::atomic<bool> started{false};
  std::thread waiter{[&] {
    std::uint32_t const b = detail::slow_work_count();
    started = true;
    m.lock();
    waiter_count = detail::slow_work_count() - b;
    m.unlock();
  }};
  while (!started) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  m.unlock();
  waiter.join();
  EXPECT_EQ(waiter_count.load(), 1U);
}

// The pool: its growth counts; warm pairs, stream-ordered or synchronous (cudaMalloc's
// semantics: the free waits for a barrier, the allocation takes clean memory), count
// nothing until a barrier or a growth is due.
TEST_F(SlowWork, ThePoolsGrowthCountsItsFreeListHitsDoNot) {
  pool_memory_resource pool{&cuda_, pool_options{0, {}, 8 * MiB}};
  std::uint32_t before = detail::slow_work_count();
  void* p = pool.allocate(4 * KiB);
  EXPECT_GT(detail::slow_work_count(), before) << "the first allocation grows the pool";
  pool.deallocate(p, 4 * KiB);
  before = detail::slow_work_count();
  for (int i = 0; i < 100; ++i) pool.deallocate(pool.allocate(4 * KiB), 4 * KiB);
  EXPECT_EQ(detail::slow_work_count(), before) << "stream-ordered pairs on the legacy stream";
  auto sync_pair = [&] {
    scoped_call_context sync{"cudaMalloc", -1, true};
    pool.deallocate(pool.allocate(4 * KiB), 4 * KiB);
  };
  sync_pair();  // the pool's memory sits in the legacy stream's list: made clean once
  before = detail::slow_work_count();
  for (int i = 0; i < 100; ++i) sync_pair();
  EXPECT_EQ(detail::slow_work_count(), before) << "synchronous pairs served from clean memory";
}

TEST_F(SlowWork, BinningOverAPoolCountsOnlyItsGrowths) {
  pool_memory_resource pool{&cuda_, pool_options{0, {}, 8 * MiB}};
  binning_memory_resource bins{&pool, 8, 20};                                             // 256 B .. 1 MiB bins
  for (std::size_t n : {256UL, 64 * KiB, 4 * MiB}) bins.deallocate(bins.allocate(n), n);  // each bin grows once
  std::uint32_t const before = detail::slow_work_count();
  for (int i = 0; i < 100; ++i) {
    for (std::size_t n : {256UL, 64 * KiB, 4 * MiB}) bins.deallocate(bins.allocate(n), n);
  }
  EXPECT_EQ(detail::slow_work_count(), before);
}

}  // namespace
}  // namespace gpumem
