// GPUMEM_SIM_NO_VMM=1 (set by CTest for this executable): the device reports no
// virtual memory management and every VMM entry point is unsupported, so
// fallbacks to cuMemAlloc can be tested.

#include "sim_driver.hpp"

namespace gpumem::test {
namespace {

using NoVmmTest = SimDriverTest;

constexpr std::size_t G = std::size_t{2} << 20;

TEST_F(NoVmmTest, AttributeIsZeroAndEveryEntryPointIsUnsupported) {
  int v = -1;
  ASSERT_EQ(drv.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 0);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  std::size_t g = 0;
  EXPECT_EQ(drv.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_NOT_SUPPORTED);
  CUdeviceptr p = 0;
  EXPECT_EQ(drv.cuMemAddressReserve(&p, G, 0, 0, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(drv.cuMemAddressFree(p, G), CUDA_ERROR_NOT_SUPPORTED);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(drv.cuMemCreate(&h, G, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(drv.cuMemRelease(h), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(drv.cuMemMap(p, G, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(drv.cuMemUnmap(p, G), CUDA_ERROR_NOT_SUPPORTED);
  CUmemAccessDesc d{};
  d.location = prop.location;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_EQ(drv.cuMemSetAccess(p, G, &d, 1), CUDA_ERROR_NOT_SUPPORTED);
  unsigned long long flags = 0;
  EXPECT_EQ(drv.cuMemGetAccess(&flags, &prop.location, p), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(drv.cuMemGetAllocationPropertiesFromHandle(&prop, h), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(drv.cuMemRetainAllocationHandle(&h, nullptr), CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_EQ(drv.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 0);
  int fd = -1;
  EXPECT_EQ(drv.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(drv.cuMemImportFromShareableHandle(&h, nullptr, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(sim.live_allocations(0), 0U);
  // Ordinary allocation is unaffected.
  CUdeviceptr d_ptr = alloc(G);
  EXPECT_EQ(drv.cuMemFree(d_ptr), CUDA_SUCCESS);
}

}  // namespace
}  // namespace gpumem::test
