// Stream capture: recorded, not run; what invalidates it, as in CUDA.

#include "sim_driver.hpp"

#include <thread>

namespace gpumem::test {
namespace {

void bump(void* p) { ++*static_cast<int*>(p); }

class CaptureTest : public SimDriverTest {
 protected:
  void SetUp() override {
    SimDriverTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  void TearDown() override {
    if (s != nullptr) drv.cuStreamDestroy(s);
    SimDriverTest::TearDown();
  }
  CUstream s = nullptr;
};

TEST_F(CaptureTest, CapturedWorkIsRecordedNotRun) {
  int runs = 0;
  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUstreamCaptureStatus status{};
  ASSERT_EQ(drv.cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_EQ(drv.cuLaunchHostFunc(s, bump, &runs), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(drv.cuMemAllocAsync(&p, 1024, s), CUDA_SUCCESS);  // a graph allocation: real memory
  EXPECT_NE(p, 0U);
  ASSERT_EQ(drv.cuMemFreeAsync(p, s), CUDA_SUCCESS);
  cuuint64_t id = 0;
  CUgraph in_progress = nullptr;
  ASSERT_EQ(drv.cuStreamGetCaptureInfo(s, &status, &id, &in_progress, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_NE(id, 0U);
  CUgraph g = nullptr;
  ASSERT_EQ(drv.cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  EXPECT_EQ(g, in_progress);
  std::size_t nodes = 0;
  ASSERT_EQ(drv.cuGraphGetNodes(g, nullptr, &nodes), CUDA_SUCCESS);
  EXPECT_EQ(nodes, 3U);
  sim.run_all();
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(sim.live_allocations(0), 1U);  // the graph owns it until destroyed
  ASSERT_EQ(drv.cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(sim.live_allocations(0), 0U);
  EXPECT_EQ(drv.cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(CaptureTest, SynchronizingTheCapturingStreamInvalidatesIt) {
  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUstreamCaptureStatus status{};
  ASSERT_EQ(drv.cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  int runs = 0;
  EXPECT_EQ(drv.cuLaunchHostFunc(s, bump, &runs), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CUgraph g = reinterpret_cast<CUgraph>(0x1234);
  EXPECT_EQ(drv.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(g, nullptr);
  ASSERT_EQ(drv.cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(sim.violations(), 1);
}

TEST_F(CaptureTest, QueryOfTheCapturingStreamInvalidatesIt) {
  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuStreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g = nullptr;
  EXPECT_EQ(drv.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(sim.violations(), 1);
}

TEST_F(CaptureTest, EventRecordedInTheCaptureMayNotBeQueried) {
  CUevent e = nullptr;
  ASSERT_EQ(drv.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuEventQuery(e), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g = nullptr;
  EXPECT_EQ(drv.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  ASSERT_EQ(drv.cuEventDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 1);
}

TEST_F(CaptureTest, SyncAllocFreeAndContextSyncAreUnsafeDuringGlobalCapture) {
  CUdeviceptr before = alloc(256);
  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(drv.cuMemAlloc(&p, 256), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g = nullptr;
  EXPECT_EQ(drv.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(drv.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  // Another thread in global mode is affected by a global capture too.
  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUresult other = CUDA_SUCCESS;
  std::thread([&] {
    drv.cuCtxSetCurrent(ctx);
    other = drv.cuMemFree(before);
  }).join();
  EXPECT_EQ(other, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(drv.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(sim.violations(), 3);
  EXPECT_EQ(drv.cuMemFree(before), CUDA_SUCCESS);
}

TEST_F(CaptureTest, QueriesOfOtherStreamsAndEventsAreUnsafeDuringGlobalCapture) {
  CUstream other = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e = nullptr;
  ASSERT_EQ(drv.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventRecord(e, other), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuStreamQuery(other), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(drv.cuEventQuery(e), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(drv.cuEventSynchronize(e), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(drv.cuStreamSynchronize(other), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g = nullptr;
  EXPECT_EQ(drv.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // A capturing stream may not wait on work recorded outside the capture.
  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuStreamWaitEvent(s, e, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
  EXPECT_EQ(drv.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(sim.violations(), 2);  // one per invalidated capture
  ASSERT_EQ(drv.cuStreamSynchronize(other), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamDestroy(other), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventDestroy(e), CUDA_SUCCESS);
}

TEST_F(CaptureTest, ContextSynchronizeIsIllegalDuringAnyCapture) {
  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_EQ(drv.cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_EQ(drv.cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  CUgraph g = nullptr;
  EXPECT_EQ(drv.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(sim.violations(), 1);
}

TEST_F(CaptureTest, DestroyingTheCapturingStreamEndsTheCapture) {
  CUstream doomed = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&doomed, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamBeginCapture(doomed, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(drv.cuMemAllocAsync(&p, 512, doomed), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemFreeAsync(p, doomed), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamDestroy(doomed), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 1);
  EXPECT_EQ(sim.live_allocations(0), 0U);  // the graph's memory went with it
  p = alloc(256);                          // no capture left to forbid it
  EXPECT_EQ(drv.cuMemFree(p), CUDA_SUCCESS);
}

TEST_F(CaptureTest, RelaxedModesAllowUnsafeCalls) {
  // A thread-local capture does not restrict other threads' allocations.
  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  CUresult other = CUDA_ERROR_UNKNOWN;
  std::thread([&] {
    drv.cuCtxSetCurrent(ctx);
    CUdeviceptr p = 0;
    other = drv.cuMemAlloc(&p, 256);
    if (other == CUDA_SUCCESS) other = drv.cuMemFree(p);
  }).join();
  EXPECT_EQ(other, CUDA_SUCCESS);
  // This thread can opt out with cuThreadExchangeStreamCaptureMode.
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_EQ(drv.cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
  CUdeviceptr p = 0;
  EXPECT_EQ(drv.cuMemAlloc(&p, 256), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemFree(p), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_RELAXED);
  CUgraph g = nullptr;
  ASSERT_EQ(drv.cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(CaptureTest, LegacyStreamUseWhileABlockingStreamCapturesIsImplicit) {
  CUstream blocking = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  int runs = 0;
  EXPECT_EQ(drv.cuLaunchHostFunc(nullptr, bump, &runs), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CUgraph g = nullptr;
  EXPECT_EQ(drv.cuStreamEndCapture(blocking, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(drv.cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_EQ(drv.cuStreamDestroy(blocking), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 1);
}

TEST_F(CaptureTest, WaitOnACapturedEventJoinsTheCapture) {
  CUstream other = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent fork = nullptr, join = nullptr;
  ASSERT_EQ(drv.cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventCreate(&join, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventRecord(fork, s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamWaitEvent(other, fork, 0), CUDA_SUCCESS);
  CUstreamCaptureStatus status{};
  ASSERT_EQ(drv.cuStreamIsCapturing(other, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  int runs = 0;
  ASSERT_EQ(drv.cuLaunchHostFunc(other, bump, &runs), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventRecord(join, other), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamWaitEvent(s, join, 0), CUDA_SUCCESS);
  CUgraph g = nullptr;
  EXPECT_EQ(drv.cuStreamEndCapture(other, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
  EXPECT_EQ(drv.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  ASSERT_EQ(drv.cuStreamIsCapturing(other, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  sim.run_all();
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(sim.violations(), 1);  // ending on the wrong stream
  ASSERT_EQ(drv.cuStreamDestroy(other), CUDA_SUCCESS);
  for (CUevent e : {fork, join}) ASSERT_EQ(drv.cuEventDestroy(e), CUDA_SUCCESS);
}

}  // namespace
}  // namespace gpumem::test
