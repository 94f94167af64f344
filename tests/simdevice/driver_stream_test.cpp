// Streams and events: work stays in flight until a synchronization runs it.

#include "sim_driver.hpp"

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

// Host functions append their tag to a shared log.
struct trace {
  std::mutex mutex;
  std::string log;
};
struct step {
  trace* t;
  char tag;
};
void record_step(void* p) {
  auto* s = static_cast<step*>(p);
  std::lock_guard lock(s->t->mutex);
  s->t->log.push_back(s->tag);
}

using StreamTest = SimDriverTest;

TEST_F(StreamTest, HostFunctionsRunInFifoOrderOnlyWhenSynchronized) {
  CUstream s = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&s, 0), CUDA_SUCCESS);
  trace t;
  step steps[] = {{&t, 'a'}, {&t, 'b'}, {&t, 'c'}};
  for (auto& st : steps) ASSERT_EQ(drv.cuLaunchHostFunc(s, record_step, &st), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "");
  EXPECT_EQ(drv.cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(drv.cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "abc");
  EXPECT_EQ(drv.cuStreamQuery(s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(StreamTest, WaitOnAnEventRunsTheRecordingStreamFirst) {
  CUstream producer = nullptr, consumer = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&producer, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamCreate(&consumer, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e = nullptr;
  ASSERT_EQ(drv.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  trace t;
  step p1{&t, '1'}, p2{&t, '2'}, c{&t, 'c'};
  ASSERT_EQ(drv.cuLaunchHostFunc(producer, record_step, &p1), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventRecord(e, producer), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuLaunchHostFunc(producer, record_step, &p2), CUDA_SUCCESS);  // after the record
  ASSERT_EQ(drv.cuStreamWaitEvent(consumer, e, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuLaunchHostFunc(consumer, record_step, &c), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuEventQuery(e), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(drv.cuStreamSynchronize(consumer), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "1c");  // producer ran up to its record only
  EXPECT_EQ(drv.cuEventQuery(e), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuStreamQuery(producer), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(drv.cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "1c");
  ASSERT_EQ(drv.cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "1c2");
  EXPECT_GE(sim.call_count("cuStreamWaitEvent"), 1);
  for (CUstream s : {producer, consumer}) ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventDestroy(e), CUDA_SUCCESS);
}

TEST_F(StreamTest, AsyncFreeReturnsMemoryOnlyWhenItsOperationRuns) {
  CUstream s = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(drv.cuMemAllocAsync(&p, 4096, s), CUDA_SUCCESS);
  std::size_t free_before = 0, total = 0;
  ASSERT_EQ(drv.cuMemGetInfo(&free_before, &total), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemFreeAsync(p, s), CUDA_SUCCESS);
  std::size_t free_after = 0;
  ASSERT_EQ(drv.cuMemGetInfo(&free_after, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_after, free_before);
  EXPECT_EQ(sim.live_allocations(0), 1U);
  ASSERT_EQ(drv.cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemGetInfo(&free_after, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_after, free_before + 4096);
  EXPECT_EQ(sim.live_allocations(0), 0U);
  // gpumemsim_run_all is a synchronization point too.
  ASSERT_EQ(drv.cuMemAllocAsync(&p, 256, s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemFreeAsync(p, s), CUDA_SUCCESS);
  EXPECT_EQ(sim.live_allocations(0), 1U);
  sim.run_all();
  EXPECT_EQ(sim.live_allocations(0), 0U);
  ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(StreamTest, SyncFreeCompletesPendingWorkOfTheContext) {
  CUstream s = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  trace t;
  step a{&t, 'a'};
  ASSERT_EQ(drv.cuLaunchHostFunc(s, record_step, &a), CUDA_SUCCESS);
  CUdeviceptr p = alloc(256);
  ASSERT_EQ(drv.cuMemFree(p), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "a");
  ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(StreamTest, LegacyStreamOrdersWithBlockingStreamsOnly) {
  CUstream blocking = nullptr, nonblocking = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  trace t;
  step b{&t, 'b'}, n{&t, 'n'}, l{&t, 'l'}, after{&t, 'x'};
  ASSERT_EQ(drv.cuLaunchHostFunc(blocking, record_step, &b), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuLaunchHostFunc(nonblocking, record_step, &n), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuLaunchHostFunc(CU_STREAM_LEGACY, record_step, &l), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuLaunchHostFunc(blocking, record_step, &after), CUDA_SUCCESS);
  // 'l' waits for 'b'; 'x' waits for 'l'. Synchronizing the legacy stream also
  // waits for all earlier blocking-stream work ('x'), never for non-blocking work.
  ASSERT_EQ(drv.cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "blx");
  EXPECT_EQ(drv.cuStreamQuery(blocking), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuStreamQuery(nonblocking), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(drv.cuStreamSynchronize(nonblocking), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "blxn");
  unsigned flags = 99;
  ASSERT_EQ(drv.cuStreamGetFlags(nonblocking, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
  CUcontext owner = nullptr;
  ASSERT_EQ(drv.cuStreamGetCtx(blocking, &owner), CUDA_SUCCESS);
  EXPECT_EQ(owner, ctx);
  for (CUstream s : {blocking, nonblocking}) ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(StreamTest, PerThreadStreamIsItsOwnQueue) {
  trace t;
  step p{&t, 'p'};
  ASSERT_EQ(drv.cuLaunchHostFunc(CU_STREAM_PER_THREAD, record_step, &p), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(drv.cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "p");
}

struct reentry {
  CUdeviceptr ptr;
  CUresult result;
  std::size_t live_inside;
};
void free_from_host_function(void* p) {
  auto* r = static_cast<reentry*>(p);
  auto const& d = sim_driver::get();
  r->result = d.cuMemFree(r->ptr);
  r->live_inside = sim_control::get().live_allocations(0);
}

TEST_F(StreamTest, HostFunctionMayCallBackIntoTheDriver) {
  CUstream s = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&s, 0), CUDA_SUCCESS);
  reentry r{alloc(512), CUDA_ERROR_UNKNOWN, 99};
  ASSERT_EQ(drv.cuLaunchHostFunc(s, free_from_host_function, &r), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamSynchronize(s), CUDA_SUCCESS);  // no deadlock
  EXPECT_EQ(r.result, CUDA_SUCCESS);
  EXPECT_EQ(r.live_inside, 0U);
  ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(StreamTest, DestroyedHandlesAreViolations) {
  CUstream s = nullptr;
  CUevent e = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&s, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventCreate(&e, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(drv.cuEventRecord(e, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(sim.violations(), 2);
}

TEST_F(StreamTest, EventsTimeTheirRecords) {
  CUevent start = nullptr, stop = nullptr, untimed = nullptr;
  ASSERT_EQ(drv.cuEventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventCreate(&stop, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  float ms = -1;
  EXPECT_EQ(drv.cuEventQuery(start), CUDA_SUCCESS);  // never recorded: complete
  ASSERT_EQ(drv.cuEventRecord(start, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventRecord(stop, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventRecord(untimed, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuEventElapsedTime(&ms, start, stop), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(drv.cuEventSynchronize(untimed), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventElapsedTime(&ms, start, stop), CUDA_SUCCESS);
  EXPECT_GE(ms, 0.0F);
  EXPECT_EQ(drv.cuEventElapsedTime(&ms, start, untimed), CUDA_ERROR_INVALID_HANDLE);
  for (CUevent e : {start, stop, untimed}) ASSERT_EQ(drv.cuEventDestroy(e), CUDA_SUCCESS);
}

TEST_F(StreamTest, AsyncCopiesAndMemsetsAreStreamOrdered) {
  CUstream s = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = alloc(256);
  std::memset(reinterpret_cast<void*>(p), 0, 256);
  ASSERT_EQ(drv.cuMemsetD8Async(p, 0x11, 256, s), CUDA_SUCCESS);
  unsigned char const src[4] = {1, 2, 3, 4};
  ASSERT_EQ(drv.cuMemcpyHtoDAsync(p, src, sizeof src, s), CUDA_SUCCESS);
  auto const* bytes = reinterpret_cast<unsigned char const*>(p);
  EXPECT_EQ(bytes[0], 0);  // in flight
  ASSERT_EQ(drv.cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(bytes[0], 1);
  EXPECT_EQ(bytes[4], 0x11);
  ASSERT_EQ(drv.cuMemFree(p), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
}

}  // namespace
}  // namespace gpumem::test
