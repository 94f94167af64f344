// Contexts made by cuCtxCreate next to the primary contexts: the context stack,
// what a context owns and what its destruction takes with it.

#include "sim_driver.hpp"

#include <future>
#include <thread>

namespace gpumem::test {
namespace {

using ContextTest = SimDriverTest;

TEST_F(ContextTest, CreatedContextIsCurrentAndDistinctFromThePrimary) {
  CUcontext made = nullptr;
  ASSERT_EQ(drv.cuCtxCreate(&made, nullptr, 0, 1), CUDA_SUCCESS);
  ASSERT_NE(made, nullptr);
  CUcontext cur = nullptr;
  ASSERT_EQ(drv.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, made);
  CUdevice dev = -1;
  ASSERT_EQ(drv.cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  CUcontext primary1 = nullptr;
  ASSERT_EQ(drv.cuDevicePrimaryCtxRetain(&primary1, 1), CUDA_SUCCESS);
  EXPECT_NE(primary1, made);
  EXPECT_EQ(drv.cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  // Destroying it pops it: the primary context of device 0 is current again.
  ASSERT_EQ(drv.cuCtxDestroy(made), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, ctx);
}

TEST_F(ContextTest, PushPopSwitchesBetweenCreatedAndPrimaryContexts) {
  CUcontext a = nullptr;
  CUcontext b = nullptr;
  ASSERT_EQ(drv.cuCtxCreate(&a, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxCreate(&b, nullptr, 0, 1), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, b);
  CUcontext cur = nullptr;
  ASSERT_EQ(drv.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, a);
  ASSERT_EQ(drv.cuCtxPushCurrent(b), CUDA_SUCCESS);
  CUdevice dev = -1;
  ASSERT_EQ(drv.cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, a);
  ASSERT_EQ(drv.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, ctx);
  EXPECT_EQ(drv.cuCtxDestroy(a), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuCtxDestroy(b), CUDA_SUCCESS);
}

TEST_F(ContextTest, AllocationsBelongToTheirContextAndDieWithIt) {
  CUcontext made = nullptr;
  ASSERT_EQ(drv.cuCtxCreate(&made, nullptr, 0, 1), CUDA_SUCCESS);
  CUdeviceptr kept = alloc(4096);
  CUdeviceptr freed = alloc(8192);
  CUcontext owner = nullptr;
  ASSERT_EQ(drv.cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, kept), CUDA_SUCCESS);
  EXPECT_EQ(owner, made);
  int ordinal = -1;
  ASSERT_EQ(drv.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, kept), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);
  CUstream s = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr async = 0;
  ASSERT_EQ(drv.cuMemAllocAsync(&async, 4096, s), CUDA_SUCCESS);
  CUcontext stream_ctx = nullptr;
  ASSERT_EQ(drv.cuStreamGetCtx(s, &stream_ctx), CUDA_SUCCESS);
  EXPECT_EQ(stream_ctx, made);
  // A free needs no particular context: the primary of device 0 frees it.
  ASSERT_EQ(drv.cuCtxPushCurrent(ctx), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemFree(freed), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(sim.live_allocations(1), 2U);
  // Destroying the context frees what it still owns, its streams go with it.
  ASSERT_EQ(drv.cuCtxDestroy(made), CUDA_SUCCESS);
  EXPECT_EQ(sim.live_allocations(1), 0U);
  EXPECT_EQ(drv.cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(sim.violations(), 1);  // the destroyed stream's use is counted
  sim.reset_violations();
}

TEST_F(ContextTest, DestroyedContextIsReportedWhereverItIsUsed) {
  CUcontext made = nullptr;
  ASSERT_EQ(drv.cuCtxCreate(&made, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxDestroy(made), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuCtxSetCurrent(made), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(drv.cuCtxDestroy(made), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(sim.violations(), 2);
  sim.reset_violations();
  // Another thread that had it current is told it is destroyed.
  CUcontext shared = nullptr;
  ASSERT_EQ(drv.cuCtxCreate(&shared, nullptr, 0, 0), CUDA_SUCCESS);
  std::promise<CUresult> before;
  std::promise<void> go;
  CUresult after = CUDA_ERROR_UNKNOWN;
  std::thread other([&, gone = go.get_future()] {
    drv.cuCtxSetCurrent(shared);
    CUdeviceptr p = 0;
    CUresult const r = drv.cuMemAlloc(&p, 256);
    if (r == CUDA_SUCCESS) drv.cuMemFree(p);
    before.set_value(r);
    gone.wait();
    after = drv.cuMemAlloc(&p, 256);
  });
  EXPECT_EQ(before.get_future().get(), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxDestroy(shared), CUDA_SUCCESS);
  go.set_value();
  other.join();
  EXPECT_EQ(after, CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(drv.cuCtxDestroy(ctx), CUDA_ERROR_INVALID_CONTEXT);  // a primary context is released, not destroyed
  EXPECT_EQ(drv.cuCtxDestroy(nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(ContextTest, CreateChecksItsArguments) {
  CUcontext c = nullptr;
  EXPECT_EQ(drv.cuCtxCreate(nullptr, nullptr, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuCtxCreate(&c, nullptr, 0, 7), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(drv.cuCtxCreate(&c, nullptr, CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD, 0), CUDA_ERROR_INVALID_VALUE);
  CUctxCreateParams neither{};
  EXPECT_EQ(drv.cuCtxCreate(&c, &neither, 0, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(drv.cuCtxCreate(&c, nullptr, CU_CTX_SCHED_BLOCKING_SYNC | CU_CTX_MAP_HOST, 0), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuCtxDestroy(c), CUDA_SUCCESS);
}

TEST_F(ContextTest, PeerAccessIsPerDevicePairAndReportedTwice) {
  int can = -1;
  ASSERT_EQ(drv.cuDeviceCanAccessPeer(&can, 0, 1), CUDA_SUCCESS);
  EXPECT_EQ(can, 1);
  ASSERT_EQ(drv.cuDeviceCanAccessPeer(&can, 1, 1), CUDA_SUCCESS);
  EXPECT_EQ(can, 0);
  EXPECT_EQ(drv.cuDeviceCanAccessPeer(&can, 0, 9), CUDA_ERROR_INVALID_DEVICE);
  CUcontext peer = nullptr;
  ASSERT_EQ(drv.cuDevicePrimaryCtxRetain(&peer, 1), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuCtxDisablePeerAccess(peer), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  EXPECT_EQ(drv.cuCtxEnablePeerAccess(peer, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuCtxEnablePeerAccess(ctx, 0), CUDA_ERROR_INVALID_DEVICE);  // itself
  EXPECT_EQ(drv.cuCtxEnablePeerAccess(peer, 0), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuCtxEnablePeerAccess(peer, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  EXPECT_EQ(drv.cuCtxDisablePeerAccess(peer), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
}

TEST_F(ContextTest, PeerCopiesMoveBytesBetweenDevices) {
  CUcontext peer = nullptr;
  ASSERT_EQ(drv.cuDevicePrimaryCtxRetain(&peer, 1), CUDA_SUCCESS);
  CUdeviceptr src = alloc(4096);
  ASSERT_EQ(drv.cuCtxSetCurrent(peer), CUDA_SUCCESS);
  CUdeviceptr dst = alloc(4096);
  ASSERT_EQ(drv.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemsetD8(src, 0x5a, 4096), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemcpyPeer(dst, peer, src, ctx, 4096), CUDA_SUCCESS);
  unsigned char host[4096] = {};
  ASSERT_EQ(drv.cuMemcpyDtoH(host, dst, sizeof host), CUDA_SUCCESS);
  EXPECT_EQ(host[0], 0x5a);
  EXPECT_EQ(host[4095], 0x5a);
  // Asynchronous: done once the stream is synchronized.
  CUstream s = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemsetD8(dst, 0x33, 4096), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemcpyPeerAsync(src + 1024, ctx, dst, peer, 1024, s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemcpyDtoH(host, src, sizeof host), CUDA_SUCCESS);
  EXPECT_EQ(host[1023], 0x5a);
  EXPECT_EQ(host[1024], 0x33);
  EXPECT_EQ(host[2047], 0x33);
  EXPECT_EQ(host[2048], 0x5a);
  // A pointer must lie on its context's device, and within its allocation.
  EXPECT_EQ(drv.cuMemcpyPeer(dst, ctx, src, ctx, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemcpyPeer(dst, peer, src + 4000, ctx, 200), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemcpyPeer(dst, peer, src, ctx, 0), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemFree(src), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemFree(dst), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
}

TEST_F(ContextTest, PrimaryStateIsActiveOnlyWhileRetained) {
  unsigned flags = 0;
  int active = -1;
  ASSERT_EQ(drv.cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  CUcontext made = nullptr;
  ASSERT_EQ(drv.cuCtxCreate(&made, nullptr, 0, 1), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);  // a created context does not activate the primary
  EXPECT_EQ(drv.cuCtxDestroy(made), CUDA_SUCCESS);
}

}  // namespace
}  // namespace gpumem::test
