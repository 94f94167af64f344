// cuGetProcAddress: ABI version by cudaVersion, _ptsz by flag, not-found status.

#include "sim_driver.hpp"

namespace gpumem::test {
namespace {

class ProcAddressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(drv.handle, nullptr);
    if (!sim_control::get().present()) GTEST_SKIP() << "needs the simulated device";
  }
  void* exported(char const* name) const { return dlsym(drv.handle, name); }
  void* lookup(char const* name, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status,
               CUresult expected = CUDA_SUCCESS) const {
    void* fn = reinterpret_cast<void*>(0x1);
    EXPECT_EQ(drv.cuGetProcAddress(name, &fn, version, flags, status), expected) << name;
    return fn;
  }
  sim_driver const& drv = sim_driver::get();
};

TEST_F(ProcAddressTest, BaseNamesResolveToTheAbiVersionOfTheRequestedRelease) {
  CUdriverProcAddressQueryResult status{};
  struct expectation {
    char const* base;
    char const* exported;
  } const cases[] = {
      {"cuMemAlloc", "cuMemAlloc_v2"},
      {"cuMemFree", "cuMemFree_v2"},
      {"cuMemGetInfo", "cuMemGetInfo_v2"},
      {"cuStreamDestroy", "cuStreamDestroy_v2"},
      {"cuEventDestroy", "cuEventDestroy_v2"},
      {"cuMemAllocPitch", "cuMemAllocPitch_v2"},
      {"cuCtxPushCurrent", "cuCtxPushCurrent_v2"},
      {"cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2"},
      {"cuGetProcAddress", "cuGetProcAddress_v2"},
      {"cuStreamGetCaptureInfo", "cuStreamGetCaptureInfo_v3"},
      {"cuMemAllocAsync", "cuMemAllocAsync"},
      {"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2"},
  };
  for (auto const& c : cases) {
    void* fn = lookup(c.base, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS) << c.base;
    EXPECT_EQ(fn, exported(c.exported)) << c.base;
    EXPECT_NE(fn, nullptr) << c.base;
  }
  // Older releases get the older ABI where the driver still has it.
  EXPECT_EQ(lookup("cuGetProcAddress", 11030, 0, &status), exported("cuGetProcAddress"));
  EXPECT_EQ(lookup("cuEventElapsedTime", 12000, 0, &status), exported("cuEventElapsedTime"));
  EXPECT_EQ(lookup("cuEventElapsedTime", 12080, 0, &status), exported("cuEventElapsedTime_v2"));
}

TEST_F(ProcAddressTest, PerThreadFlagSelectsPtszVariants) {
  CUdriverProcAddressQueryResult status{};
  auto const ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  EXPECT_EQ(lookup("cuMemAllocAsync", 13000, ptds, &status), exported("cuMemAllocAsync_ptsz"));
  EXPECT_EQ(lookup("cuMemFreeAsync", 13000, ptds, &status), exported("cuMemFreeAsync_ptsz"));
  EXPECT_EQ(lookup("cuStreamSynchronize", 13000, ptds, &status), exported("cuStreamSynchronize_ptsz"));
  EXPECT_EQ(lookup("cuStreamBeginCapture", 13000, ptds, &status), exported("cuStreamBeginCapture_v2_ptsz"));
  EXPECT_EQ(lookup("cuStreamSynchronize", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status),
            exported("cuStreamSynchronize"));
  // No _ptsz variant: the plain entry point.
  EXPECT_EQ(lookup("cuMemAlloc", 13000, ptds, &status), exported("cuMemAlloc_v2"));
}

TEST_F(ProcAddressTest, UnknownNamesAndTooOldVersionsAreNotFound) {
  CUdriverProcAddressQueryResult status{};
  // Measured on driver 580: success, with the reason in the status.
  EXPECT_EQ(lookup("cuNoSuchThing", 13000, 0, &status), nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(lookup("cuMemAllocAsync", 11000, 0, &status), nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  // The v1 entry point has no status to report through.
  using v1_t = CUresult (*)(char const*, void**, int, cuuint64_t);
  auto v1 = reinterpret_cast<v1_t>(exported("cuGetProcAddress"));
  ASSERT_NE(v1, nullptr);
  void* found = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(v1("cuNoSuchThing", &found, 13000, 0), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(found, nullptr);
  EXPECT_EQ(v1("cuMemAlloc", &found, 13000, 0), CUDA_SUCCESS);
  EXPECT_EQ(found, exported("cuMemAlloc_v2"));
  void* fn = nullptr;
  EXPECT_EQ(drv.cuGetProcAddress(nullptr, &fn, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuGetProcAddress("cuMemAlloc", &fn, 13000, 0x80, &status), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(ProcAddressTest, ResolvedPointersAreTheWorkingEntryPoints) {
  ASSERT_EQ(drv.cuInit(0), CUDA_SUCCESS);
  CUdriverProcAddressQueryResult status{};
  auto get_count = reinterpret_cast<decltype(&cuDeviceGetCount)>(lookup("cuDeviceGetCount", 13000, 0, &status));
  ASSERT_NE(get_count, nullptr);
  int n = 0;
  ASSERT_EQ(get_count(&n), CUDA_SUCCESS);
  EXPECT_EQ(n, 2);
  long const before = sim_control::get().call_count("cuDeviceGetCount");
  ASSERT_EQ(get_count(&n), CUDA_SUCCESS);
  EXPECT_EQ(sim_control::get().call_count("cuDeviceGetCount"), before + 1);
}

}  // namespace
}  // namespace gpumem::test
