// async_memory_resource against the driver (simulated device or a real GPU).

#include <gpumem/async_memory_resource.hpp>
#include <gpumem/detail/driver_api.hpp>

#include <support/device_helpers.hpp>
#include <support/sim_control.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace gpumem {
namespace {

class AsyncResource : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::driver_available()) GTEST_SKIP() << "no CUDA driver (simulated or real)";
    ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
  }
  static cuuint64_t threshold(CUmemoryPool pool) {
    cuuint64_t v = 0;
    EXPECT_EQ(detail::driver().cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v), CUDA_SUCCESS);
    return v;
  }
  static CUstream new_stream() {
    CUstream s{};
    EXPECT_EQ(detail::driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    return s;
  }
  test::sim_control& sim = test::sim_control::get();
};

TEST_F(AsyncResource, OwnsAPoolThatKeepsItsMemoryByDefault) {
  auto const creates = sim.call_count("cuMemPoolCreate");
  auto const destroys = sim.call_count("cuMemPoolDestroy");
  {
    async_memory_resource mr;
    EXPECT_TRUE(mr.owns_pool());
    ASSERT_NE(mr.pool_handle(), nullptr);
    EXPECT_EQ(threshold(mr.pool_handle()), std::numeric_limits<cuuint64_t>::max());
    if (sim.present()) { EXPECT_EQ(sim.call_count("cuMemPoolCreate"), creates + 1); }
  }
  if (sim.present()) { EXPECT_EQ(sim.call_count("cuMemPoolDestroy"), destroys + 1); }
}

TEST_F(AsyncResource, ThresholdAndInitialReservation) {
  auto const allocs = sim.call_count("cuMemAllocFromPoolAsync");
  auto const frees = sim.call_count("cuMemFreeAsync");
  async_memory_resource mr{std::size_t{64} << 20, std::size_t{4} << 20};
  EXPECT_EQ(threshold(mr.pool_handle()), cuuint64_t{64} << 20);
  if (sim.present()) {
    EXPECT_EQ(sim.call_count("cuMemAllocFromPoolAsync"), allocs + 1);
    EXPECT_EQ(sim.call_count("cuMemFreeAsync"), frees + 1);
  }
  EXPECT_EQ(mr.info().used_bytes, 0u);
}

TEST_F(AsyncResource, StreamOrderedAllocateAndFreeOnAnotherStream) {
  async_memory_resource mr;
  CUstream a = new_stream();
  CUstream b = new_stream();
  void* p = mr.allocate(3 << 20, stream_ref{a});
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(is_aligned(reinterpret_cast<std::uintptr_t>(p), allocation_alignment));
  ASSERT_EQ(detail::driver().cuStreamSynchronize(a), CUDA_SUCCESS);
  EXPECT_TRUE(test::fill_and_check(p, 3 << 20, 0x5a));
  auto const info = mr.info();
  EXPECT_GE(info.used_bytes, std::size_t{3} << 20);
  EXPECT_GE(info.reserved_bytes, info.used_bytes);
  EXPECT_EQ(info.free_bytes, info.reserved_bytes - info.used_bytes);
  mr.deallocate(p, 3 << 20, stream_ref{b});
  ASSERT_EQ(detail::driver().cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(mr.info().used_bytes, 0u);
  auto const trims = sim.call_count("cuMemPoolTrimTo");
  (void)mr.release();
  EXPECT_EQ(mr.info().reserved_bytes, 0u);  // trimmed to zero: nothing in use
  if (sim.present()) { EXPECT_EQ(sim.call_count("cuMemPoolTrimTo"), trims + 1); }
  EXPECT_EQ(mr.failed_deallocations(), 0u);
  EXPECT_EQ(detail::driver().cuStreamDestroy(a), CUDA_SUCCESS);
  EXPECT_EQ(detail::driver().cuStreamDestroy(b), CUDA_SUCCESS);
}

TEST_F(AsyncResource, ZeroBytesAndOutOfMemory) {
  async_memory_resource mr;
  auto const allocs = sim.call_count("cuMemAllocFromPoolAsync");
  EXPECT_EQ(mr.allocate(0), nullptr);
  EXPECT_EQ(sim.call_count("cuMemAllocFromPoolAsync"), allocs);
  auto const total = test::device_total_memory();
  ASSERT_GT(total, 0u);
  try {
    (void)mr.allocate(total + (std::size_t{1} << 20));
    FAIL() << "expected out_of_memory";
  } catch (out_of_memory const& e) {
    EXPECT_NE(std::string{e.what()}.find("cuMemAllocFromPoolAsync"), std::string::npos) << e.what();
  }
}

TEST_F(AsyncResource, UsesAGivenPoolWithoutOwningIt) {
  CUdevice dev{};
  ASSERT_EQ(detail::driver().cuCtxGetDevice(&dev), CUDA_SUCCESS);
  CUmemoryPool def{};
  ASSERT_EQ(detail::driver().cuDeviceGetDefaultMemPool(&def, dev), CUDA_SUCCESS);
  auto const before = threshold(def);
  {
    async_memory_resource mr{def};
    async_memory_resource same{def};
    async_memory_resource own;
    EXPECT_FALSE(mr.owns_pool());
    EXPECT_EQ(mr.pool_handle(), def);
    EXPECT_TRUE(mr.is_equal(same));
    EXPECT_FALSE(mr.is_equal(own));
    void* p = mr.allocate(1024);
    mr.deallocate(p, 1024);
  }
  EXPECT_EQ(threshold(def), before);  // neither reconfigured nor destroyed
  EXPECT_THROW(async_memory_resource{CUmemoryPool{}}, logic_error);
}

TEST_F(AsyncResource, BadFreeIsCountedNotThrown) {
  async_memory_resource mr;
  alignas(256) static char host_memory[256];
  mr.deallocate(host_memory, 256);
  EXPECT_EQ(mr.failed_deallocations(), 1u);
}

}  // namespace
}  // namespace gpumem
