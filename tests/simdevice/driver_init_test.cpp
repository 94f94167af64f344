// Before cuInit, as on a real driver. Own executable: nothing may call cuInit first.

#include "sim_driver.hpp"

namespace gpumem::test {
namespace {

TEST(DriverInit, CallsBeforeCuInitReturnNotInitialized) {
  auto const& drv = sim_driver::get();
  ASSERT_NE(drv.handle, nullptr);
  if (!sim_control::get().present()) GTEST_SKIP() << "needs the simulated device";
  int count = -1;
  EXPECT_EQ(drv.cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  CUdeviceptr p = 0;
  EXPECT_EQ(drv.cuMemAlloc(&p, 256), CUDA_ERROR_NOT_INITIALIZED);
  int version = 0;
  EXPECT_EQ(drv.cuDriverGetVersion(&version), CUDA_SUCCESS);  // allowed before cuInit
  EXPECT_EQ(version, 13000);
  EXPECT_EQ(drv.cuInit(1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(drv.cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);
  CUdevice dev{};
  EXPECT_EQ(drv.cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
  int value = 0;
  ASSERT_EQ(drv.cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0), CUDA_SUCCESS);
  EXPECT_EQ(value, 9);
  ASSERT_EQ(drv.cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1), CUDA_SUCCESS);
  EXPECT_EQ(value, 1);
  std::size_t total = 0;
  ASSERT_EQ(drv.cuDeviceTotalMem(&total, 1), CUDA_SUCCESS);
  EXPECT_EQ(total, std::size_t{1} << 30);
  // Initialised, but no context is current on this thread yet.
  EXPECT_EQ(drv.cuMemAlloc(&p, 256), CUDA_ERROR_INVALID_CONTEXT);
}

}  // namespace
}  // namespace gpumem::test
