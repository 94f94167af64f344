// managed_memory_resource against the driver (simulated device or a real GPU).

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/managed_memory_resource.hpp>

#include <support/device_helpers.hpp>
#include <support/sim_control.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace gpumem {
namespace {

class ManagedResource : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::driver_available()) GTEST_SKIP() << "no CUDA driver (simulated or real)";
  }
  test::sim_control& sim = test::sim_control::get();
  managed_memory_resource mr;
};

TEST_F(ManagedResource, AllocatesGlobalManagedMemoryTheHostCanTouch) {
  auto const calls = sim.call_count("cuMemAllocManaged");
  auto* p = static_cast<unsigned char*>(mr.allocate(8192));
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(is_aligned(reinterpret_cast<std::uintptr_t>(p), allocation_alignment));
  std::memset(p, 0x3c, 8192);  // managed memory is host-accessible
  EXPECT_EQ(p[0], 0x3c);
  EXPECT_EQ(p[8191], 0x3c);
  EXPECT_TRUE(test::fill_and_check(p, 8192, 0x11));
  EXPECT_EQ(p[4000], 0x11);
  EXPECT_EQ(mr.info().used_bytes, 8192u);
  CUmemorytype type{};
  ASSERT_EQ(
      detail::driver().cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(p)),
      CUDA_SUCCESS);
  unsigned is_managed = 0;
  ASSERT_EQ(detail::driver().cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                                   reinterpret_cast<CUdeviceptr>(p)),
            CUDA_SUCCESS);
  EXPECT_EQ(is_managed, 1u);
  mr.deallocate(p, 8192);
  EXPECT_EQ(mr.info().used_bytes, 0u);
  EXPECT_EQ(mr.failed_deallocations(), 0u);
  if (sim.present()) { EXPECT_EQ(sim.call_count("cuMemAllocManaged"), calls + 1); }
}

TEST_F(ManagedResource, ZeroBytesAndImpossibleSizes) {
  auto const calls = sim.call_count("cuMemAllocManaged");
  EXPECT_EQ(mr.allocate(0), nullptr);
  EXPECT_EQ(sim.call_count("cuMemAllocManaged"), calls);
  // Managed memory may oversubscribe the device, but not the address space.
  try {
    (void)mr.allocate(std::size_t{1} << 60);
    FAIL() << "expected out_of_memory";
  } catch (out_of_memory const& e) {
    EXPECT_NE(std::string{e.what()}.find("cuMemAllocManaged"), std::string::npos) << e.what();
  }
}

TEST_F(ManagedResource, BadFreeIsCountedAndEqualityIsByType) {
  alignas(256) static char host_memory[256];
  mr.deallocate(host_memory, 256);
  EXPECT_EQ(mr.failed_deallocations(), 1u);
  managed_memory_resource other;
  EXPECT_TRUE(mr.is_equal(other));
}

}  // namespace
}  // namespace gpumem
