// cuda_memory_resource against the driver (simulated device or a real GPU).

#include <gpumem/cuda_memory_resource.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/managed_memory_resource.hpp>

#include <support/device_helpers.hpp>
#include <support/sim_control.hpp>

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace gpumem {
namespace {

class CudaResource : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::driver_available()) GTEST_SKIP() << "no CUDA driver (simulated or real)";
  }
  test::sim_control& sim = test::sim_control::get();
  cuda_memory_resource mr;
};

TEST_F(CudaResource, AllocatesWithOneCuMemAllocAndFreesWithOneCuMemFree) {
  auto const allocs = sim.call_count("cuMemAlloc_v2");
  auto const frees = sim.call_count("cuMemFree_v2");
  void* p = mr.allocate(1 << 20, stream_ref{reinterpret_cast<CUstream>(legacy_stream_handle)});
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(is_aligned(reinterpret_cast<std::uintptr_t>(p), allocation_alignment));
  EXPECT_TRUE(test::fill_and_check(p, 1 << 20, 0xa5));
  auto const info = mr.info();
  EXPECT_EQ(info.used_bytes, std::size_t{1} << 20);
  EXPECT_EQ(info.reserved_bytes, std::size_t{1} << 20);
  EXPECT_EQ(info.free_bytes, 0u);
  mr.deallocate(p, 1 << 20);
  EXPECT_EQ(mr.info().used_bytes, 0u);
  EXPECT_EQ(mr.failed_deallocations(), 0u);
  if (sim.present()) {
    EXPECT_EQ(sim.call_count("cuMemAlloc_v2"), allocs + 1);
    EXPECT_EQ(sim.call_count("cuMemFree_v2"), frees + 1);
  }
}

TEST_F(CudaResource, ZeroBytesIsNullWithoutADriverCall) {
  auto const allocs = sim.call_count("cuMemAlloc_v2");
  EXPECT_EQ(mr.allocate(0), nullptr);
  mr.deallocate(nullptr, 0);
  EXPECT_EQ(sim.call_count("cuMemAlloc_v2"), allocs);
  EXPECT_EQ(mr.failed_deallocations(), 0u);
}

TEST_F(CudaResource, MoreThanTheDeviceHoldsIsOutOfMemory) {
  auto const total = test::device_total_memory();
  ASSERT_GT(total, 0u);
  try {
    (void)mr.allocate(total + (std::size_t{1} << 20));
    FAIL() << "expected out_of_memory";
  } catch (out_of_memory const& e) {
    EXPECT_EQ(e.code(), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_NE(std::string{e.what()}.find("cuMemAlloc_v2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(mr.info().used_bytes, 0u);
}

TEST_F(CudaResource, BadFreeIsCountedNotThrown) {
  alignas(256) static char host_memory[256];
  mr.deallocate(host_memory, 256);  // not device memory: the driver refuses, we count
  EXPECT_EQ(mr.failed_deallocations(), 1u);
}

TEST_F(CudaResource, ThreadWithoutAContextGetsThePrimaryContext) {
  void* p = nullptr;
  std::thread t{[&] { p = mr.allocate(4096); }};
  t.join();
  ASSERT_NE(p, nullptr);
  std::thread t2{[&] { mr.deallocate(p, 4096); }};
  t2.join();
  EXPECT_EQ(mr.failed_deallocations(), 0u);
}

TEST_F(CudaResource, EqualityIsByType) {
  cuda_memory_resource other;
  managed_memory_resource managed;
  EXPECT_TRUE(mr.is_equal(other));
  EXPECT_FALSE(mr.is_equal(managed));
}

}  // namespace
}  // namespace gpumem
