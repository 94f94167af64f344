#pragma once
// Test fixture support: the driver API of whatever libcuda.so.1 the library path
// finds (the sim under CTest), reached through dlopen/dlsym by exported name.

#include "support/sim_control.hpp"

#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>

namespace gpumem::test {

// A hand-laid list: clang-format 14 reflows X-macro lists differently on every run.
// clang-format off
#define SIMTEST_DRIVER_FUNCTIONS(X)                                                              \
  X(cuInit) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)      \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxReset)           \
  X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize)                   \
  X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuMemAlloc) X(cuMemFree) X(cuMemAllocManaged)        \
  X(cuMemAllocPitch) X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemAllocFromPoolAsync)            \
  X(cuMemGetInfo) X(cuMemGetAddressRange) X(cuPointerGetAttribute) X(cuPointerGetAttributes)    \
  X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuMemPoolGetAttribute) X(cuMemPoolSetAttribute)      \
  X(cuMemPoolTrimTo) X(cuDeviceGetDefaultMemPool) X(cuDeviceGetMemPool) X(cuMemsetD8)           \
  X(cuMemsetD32) X(cuMemsetD8Async) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD)             \
  X(cuMemcpyHtoDAsync) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)              \
  X(cuStreamQuery) X(cuStreamWaitEvent) X(cuStreamGetFlags) X(cuStreamGetCtx) X(cuEventCreate)  \
  X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize) X(cuEventDestroy) X(cuEventElapsedTime) \
  X(cuLaunchHostFunc) X(cuStreamAddCallback) X(cuStreamBeginCapture) X(cuStreamEndCapture)      \
  X(cuStreamIsCapturing) X(cuStreamGetCaptureInfo) X(cuThreadExchangeStreamCaptureMode)         \
  X(cuGraphDestroy) X(cuGraphGetNodes) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle)               \
  X(cuIpcCloseMemHandle) X(cuGetProcAddress) X(cuDriverGetVersion) X(cuDevicePrimaryCtxGetState)  \
  X(cuCtxCreate) X(cuCtxDestroy) X(cuDeviceCanAccessPeer) X(cuCtxEnablePeerAccess)               \
  X(cuCtxDisablePeerAccess) X(cuMemcpyPeer) X(cuMemcpyPeerAsync) X(cuMemcpy)                    \
  X(cuMemGetAllocationGranularity) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate)    \
  X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) X(cuMemGetAccess)                 \
  X(cuMemGetAllocationPropertiesFromHandle) X(cuMemRetainAllocationHandle)                       \
  X(cuMemExportToShareableHandle) X(cuMemImportFromShareableHandle)                              \
  X(cuDeviceGetDevResource) X(cuCtxGetDevResource) X(cuGreenCtxGetDevResource)                 \
  X(cuDevSmResourceSplitByCount) X(cuDevResourceGenerateDesc) X(cuGreenCtxCreate)               \
  X(cuGreenCtxDestroy) X(cuCtxFromGreenCtx) X(cuGreenCtxGetId) X(cuGreenCtxStreamCreate)        \
  X(cuStreamGetGreenCtx) X(cuGreenCtxRecordEvent) X(cuGreenCtxWaitEvent)
// clang-format on

#define SIMTEST_STR2(x) #x
#define SIMTEST_STR(x) SIMTEST_STR2(x)

/// Typed pointers to the exported (versioned) driver symbols.
struct sim_driver {
#define SIMTEST_MEMBER(name) decltype(&::name) name = nullptr;
  SIMTEST_DRIVER_FUNCTIONS(SIMTEST_MEMBER)
#undef SIMTEST_MEMBER
  void* handle = nullptr;

  static sim_driver const& get() {
    static sim_driver const d = load();
    return d;
  }

 private:
  static sim_driver load() {
    sim_driver d;
    d.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (d.handle == nullptr) return d;
      // SIMTEST_STR expands the cuda.h macro first: cuMemAlloc -> "cuMemAlloc_v2".
#define SIMTEST_LOAD(name) d.name = reinterpret_cast<decltype(d.name)>(dlsym(d.handle, SIMTEST_STR(name)));
    SIMTEST_DRIVER_FUNCTIONS(SIMTEST_LOAD)
#undef SIMTEST_LOAD
    return d;
  }
};

/// Fixture: driver initialised, device 0's primary context current, violations
/// reset. Skips unless the sim is what was loaded.
class SimDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(drv.handle, nullptr) << dlerror();
    if (!sim.present()) GTEST_SKIP() << "needs the simulated device";
    ASSERT_EQ(drv.cuInit(0), CUDA_SUCCESS);
    CUdevice dev{};
    ASSERT_EQ(drv.cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    ASSERT_EQ(drv.cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    ASSERT_EQ(drv.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    sim.reset_violations();
  }
  void TearDown() override {
    if (!sim.present()) return;
    sim.run_all();
    drv.cuCtxSetCurrent(ctx);
    // Each test leaves nothing behind, so the next one starts from empty devices.
    EXPECT_EQ(sim.live_allocations(0), 0U);
    EXPECT_EQ(sim.live_allocations(1), 0U);
    drv.cuDevicePrimaryCtxRelease(0);
  }

  static CUdeviceptr alloc(std::size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(sim_driver::get().cuMemAlloc(&p, bytes), CUDA_SUCCESS);
    return p;
  }

  sim_driver const& drv = sim_driver::get();
  sim_control& sim = sim_control::get();
  CUcontext ctx = nullptr;
};

}  // namespace gpumem::test
