// Green contexts: SM resources split into descriptors, green contexts made from
// them, their own streams (default stream included), context-wide event records
// and waits, destruction.

#include "sim_driver.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

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

class GreenContextTest : public SimDriverTest {
 protected:
  /// A green context of `sms` SMs of `dev`, through the documented four steps.
  CUgreenCtx make_green(CUdevice dev, unsigned sms = 8) const {
    CUdevResource all{};
    EXPECT_EQ(drv.cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
    CUdevResource part{};
    unsigned groups = 1;
    EXPECT_EQ(drv.cuDevSmResourceSplitByCount(&part, &groups, &all, nullptr, 0, sms), CUDA_SUCCESS);
    CUdevResourceDesc desc = nullptr;
    EXPECT_EQ(drv.cuDevResourceGenerateDesc(&desc, &part, 1), CUDA_SUCCESS);
    CUgreenCtx g = nullptr;
    EXPECT_EQ(drv.cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS);
    return g;
  }
  /// Its CUcontext (cuCtxFromGreenCtx).
  CUcontext context_of(CUgreenCtx g) const {
    CUcontext c = nullptr;
    EXPECT_EQ(drv.cuCtxFromGreenCtx(&c, g), CUDA_SUCCESS);
    return c;
  }
  /// Queues `st` on `s` with `c` current (stream 0: c's own legacy stream).
  void launch_in(CUcontext c, CUstream s, step* st) const {
    ASSERT_EQ(drv.cuCtxPushCurrent(c), CUDA_SUCCESS);
    EXPECT_EQ(drv.cuLaunchHostFunc(s, record_step, st), CUDA_SUCCESS);
    CUcontext popped = nullptr;
    ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  }
  CUstream green_stream(CUgreenCtx g) const {
    CUstream s = nullptr;
    EXPECT_EQ(drv.cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
    return s;
  }
};

TEST_F(GreenContextTest, SplitResourceMakesAGreenContextThatIsNotMadeCurrent) {
  CUdevResource all{};
  ASSERT_EQ(drv.cuDeviceGetDevResource(0, &all, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
  EXPECT_EQ(all.type, CU_DEV_RESOURCE_TYPE_SM);
  EXPECT_EQ(all.sm.smCount, 132U);
  EXPECT_EQ(drv.cuDeviceGetDevResource(0, &all, CU_DEV_RESOURCE_TYPE_INVALID), CUDA_ERROR_INVALID_RESOURCE_TYPE);
  EXPECT_EQ(drv.cuDeviceGetDevResource(7, &all, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_DEVICE);
  // NULL result: only counts the groups; minCount 0 means groups of 2.
  unsigned groups = 0;
  ASSERT_EQ(drv.cuDevSmResourceSplitByCount(nullptr, &groups, &all, nullptr, 0, 16), CUDA_SUCCESS);
  EXPECT_EQ(groups, 8U);
  ASSERT_EQ(drv.cuDevSmResourceSplitByCount(nullptr, &groups, &all, nullptr, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(groups, 66U);
  CUdevResource parts[3]{};
  CUdevResource rest{};
  groups = 3;
  ASSERT_EQ(drv.cuDevSmResourceSplitByCount(parts, &groups, &all, &rest, 0, 40), CUDA_SUCCESS);
  EXPECT_EQ(groups, 3U);
  EXPECT_EQ(parts[2].type, CU_DEV_RESOURCE_TYPE_SM);
  EXPECT_EQ(parts[2].sm.smCount, 40U);
  EXPECT_EQ(rest.sm.smCount, 12U);
  CUdevResourceDesc desc = nullptr;
  ASSERT_EQ(drv.cuDevResourceGenerateDesc(&desc, parts, 2), CUDA_SUCCESS);
  CUgreenCtx g = nullptr;
  ASSERT_EQ(drv.cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS);
  ASSERT_NE(g, nullptr);
  CUdevResource mine{};
  ASSERT_EQ(drv.cuGreenCtxGetDevResource(g, &mine, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
  EXPECT_EQ(mine.sm.smCount, 80U);
  CUcontext cur = nullptr;
  ASSERT_EQ(drv.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, ctx);
  CUgreenCtx other = make_green(0);
  unsigned long long id = 0, other_id = 0;
  ASSERT_EQ(drv.cuGreenCtxGetId(g, &id), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxGetId(other, &other_id), CUDA_SUCCESS);
  EXPECT_NE(id, other_id);
  EXPECT_EQ(drv.cuGreenCtxDestroy(other), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuGreenCtxDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(GreenContextTest, CreationNeedsTheDefaultStreamFlagAndRetainsThePrimaryContext) {
  CUdevResource all{};
  ASSERT_EQ(drv.cuDeviceGetDevResource(1, &all, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
  CUdevResourceDesc desc = nullptr;
  EXPECT_EQ(drv.cuDevResourceGenerateDesc(&desc, &all, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuDevResourceGenerateDesc(nullptr, &all, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(drv.cuDevResourceGenerateDesc(&desc, &all, 1), CUDA_SUCCESS);
  CUgreenCtx g = nullptr;
  EXPECT_EQ(drv.cuGreenCtxCreate(&g, desc, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuGreenCtxCreate(&g, desc, 1, CU_GREEN_CTX_DEFAULT_STREAM | 0x2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuGreenCtxCreate(&g, desc, 9, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_ERROR_INVALID_DEVICE);
  unsigned flags = 0;
  int active = -1;
  ASSERT_EQ(drv.cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  ASSERT_EQ(drv.cuGreenCtxCreate(&g, desc, 1, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  ASSERT_EQ(drv.cuGreenCtxDestroy(g), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
}

TEST_F(GreenContextTest, ConvertedContextAllocatesOnItsDeviceAndSharesThePrimaryMemory) {
  CUgreenCtx g = make_green(1);
  CUcontext gc = context_of(g);
  ASSERT_NE(gc, nullptr);
  // The green handle itself is no CUcontext (documented).
  EXPECT_EQ(drv.cuCtxSetCurrent(reinterpret_cast<CUcontext>(g)), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(drv.cuCtxSetCurrent(gc), CUDA_SUCCESS);
  CUcontext cur = nullptr;
  ASSERT_EQ(drv.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, gc);
  CUdevice dev = -1;
  ASSERT_EQ(drv.cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  CUdeviceptr p = alloc(4096);
  int ordinal = -1;
  ASSERT_EQ(drv.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);
  EXPECT_EQ(sim.live_allocations(1), 1U);
  ASSERT_EQ(drv.cuMemsetD8(p, 0x5a, 4096), CUDA_SUCCESS);
  // The same pointer with device 1's primary context current.
  CUcontext primary1 = nullptr;
  ASSERT_EQ(drv.cuDevicePrimaryCtxRetain(&primary1, 1), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxPushCurrent(primary1), CUDA_SUCCESS);
  unsigned char back[16]{};
  ASSERT_EQ(drv.cuMemcpyDtoH(back, p, sizeof back), CUDA_SUCCESS);
  EXPECT_EQ(back[15], 0x5a);
  CUcontext owner = nullptr;
  ASSERT_EQ(drv.cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p), CUDA_SUCCESS);
  EXPECT_EQ(owner, primary1);  // guessed: a green context's memory is its primary context's
  ASSERT_EQ(drv.cuMemFree(p), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, primary1);
  ASSERT_EQ(drv.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, gc);
  ASSERT_EQ(drv.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxDestroy(g), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(GreenContextTest, GreenStreamsBelongToTheGreenContextWhateverIsCurrent) {
  CUgreenCtx g = make_green(0);
  CUcontext gc = context_of(g);
  CUstream s = nullptr;
  EXPECT_EQ(drv.cuGreenCtxStreamCreate(&s, g, 0, 0), CUDA_ERROR_INVALID_VALUE);           // NON_BLOCKING is required
  ASSERT_EQ(drv.cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);  // primary current
  CUcontext owner = nullptr;
  ASSERT_EQ(drv.cuStreamGetCtx(s, &owner), CUDA_SUCCESS);
  EXPECT_NE(owner, gc);  // as on an H100: not the green context's CUcontext
  CUcontext primary0 = nullptr;
  ASSERT_EQ(drv.cuDevicePrimaryCtxRetain(&primary0, 0), CUDA_SUCCESS);
  EXPECT_EQ(owner, primary0);  // guessed: its primary context
  ASSERT_EQ(drv.cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  unsigned flags = 0;
  ASSERT_EQ(drv.cuStreamGetFlags(s, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
  CUgreenCtx of = nullptr;
  ASSERT_EQ(drv.cuStreamGetGreenCtx(s, &of), CUDA_SUCCESS);
  EXPECT_EQ(of, g);
  // Streams of the primary context, and stream 0 with the primary current: none.
  CUstream plain = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&plain, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamGetGreenCtx(plain, &of), CUDA_SUCCESS);
  EXPECT_EQ(of, nullptr);
  ASSERT_EQ(drv.cuStreamGetGreenCtx(nullptr, &of), CUDA_SUCCESS);
  EXPECT_EQ(of, nullptr);
  // With the green context current: stream 0 and cuStreamCreate streams are its.
  ASSERT_EQ(drv.cuCtxPushCurrent(gc), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamGetGreenCtx(CU_STREAM_LEGACY, &of), CUDA_SUCCESS);
  EXPECT_EQ(of, g);
  CUstream made = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&made, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamGetGreenCtx(made, &of), CUDA_SUCCESS);
  EXPECT_EQ(of, g);
  CUcontext popped = nullptr;
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  trace t;
  step a{&t, 'a'};
  ASSERT_EQ(drv.cuLaunchHostFunc(s, record_step, &a), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "");
  ASSERT_EQ(drv.cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "a");
  for (CUstream x : {s, plain, made}) ASSERT_EQ(drv.cuStreamDestroy(x), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(GreenContextTest, BlockingStreamsOrderAgainstTheGreenLegacyStreamOnly) {
  CUgreenCtx g = make_green(0);
  CUcontext gc = context_of(g);
  ASSERT_EQ(drv.cuCtxPushCurrent(gc), CUDA_SUCCESS);
  CUstream blocking = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  trace t;
  step b{&t, 'b'}, l{&t, 'l'}, p{&t, 'p'};
  ASSERT_EQ(drv.cuLaunchHostFunc(blocking, record_step, &b), CUDA_SUCCESS);
  launch_in(gc, nullptr, &l);
  ASSERT_EQ(drv.cuLaunchHostFunc(CU_STREAM_LEGACY, record_step, &p), CUDA_SUCCESS);  // the primary's
  // The primary's legacy stream does not wait for the green context's work...
  ASSERT_EQ(drv.cuStreamSynchronize(CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "p");
  // ...the green one waits for its blocking stream.
  ASSERT_EQ(drv.cuCtxPushCurrent(gc), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "pbl");
  ASSERT_EQ(drv.cuStreamDestroy(blocking), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxDestroy(g), CUDA_SUCCESS);
}

TEST_F(GreenContextTest, RecordEventCoversWorkQueuedOnEveryStreamOfTheGreenContext) {
  CUgreenCtx g = make_green(0);
  CUcontext gc = context_of(g);
  CUstream s1 = green_stream(g);
  CUstream s2 = green_stream(g);
  CUstream waiter = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&waiter, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e = nullptr;  // of the primary context
  ASSERT_EQ(drv.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  trace t;
  step one{&t, '1'}, two{&t, '2'}, legacy{&t, 'l'}, later{&t, '9'}, primary{&t, 'p'};
  ASSERT_EQ(drv.cuLaunchHostFunc(s1, record_step, &one), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuLaunchHostFunc(s2, record_step, &two), CUDA_SUCCESS);
  launch_in(gc, nullptr, &legacy);
  ASSERT_EQ(drv.cuGreenCtxRecordEvent(g, e), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuLaunchHostFunc(s1, record_step, &later), CUDA_SUCCESS);  // after the record
  EXPECT_EQ(drv.cuEventQuery(e), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(drv.cuStreamWaitEvent(waiter, e, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuLaunchHostFunc(waiter, record_step, &primary), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamSynchronize(waiter), CUDA_SUCCESS);
  // All three green streams ran up to the record, before the waiter; not beyond.
  ASSERT_EQ(t.log.size(), 4U);
  EXPECT_EQ(t.log.back(), 'p');
  for (char c : {'1', '2', 'l'}) EXPECT_NE(t.log.find(c), std::string::npos) << c;
  EXPECT_EQ(drv.cuEventQuery(e), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
  // An event of another device's context is refused.
  CUcontext primary1 = nullptr;
  ASSERT_EQ(drv.cuDevicePrimaryCtxRetain(&primary1, 1), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxPushCurrent(primary1), CUDA_SUCCESS);
  CUevent foreign = nullptr;
  ASSERT_EQ(drv.cuEventCreate(&foreign, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuGreenCtxRecordEvent(g, foreign), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(drv.cuEventDestroy(foreign), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamSynchronize(s1), CUDA_SUCCESS);
  EXPECT_EQ(t.log.back(), '9');
  for (CUstream s : {s1, s2, waiter}) ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventDestroy(e), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(GreenContextTest, RecordEventAcceptsAnEventOfTheGreenContextItself) {
  CUgreenCtx g = make_green(0);
  CUcontext gc = context_of(g);
  ASSERT_EQ(drv.cuCtxPushCurrent(gc), CUDA_SUCCESS);
  CUevent e = nullptr;
  ASSERT_EQ(drv.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  CUstream s = green_stream(g);
  trace t;
  step a{&t, 'a'};
  ASSERT_EQ(drv.cuLaunchHostFunc(s, record_step, &a), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxRecordEvent(g, e), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "a");
  ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventDestroy(e), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxDestroy(g), CUDA_SUCCESS);
}

TEST_F(GreenContextTest, EventsOfThePrimaryContextRecordOnGreenStreams) {
  CUgreenCtx g = make_green(0);
  CUstream s = green_stream(g);
  CUevent e = nullptr;
  ASSERT_EQ(drv.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  trace t;
  step a{&t, 'a'};
  ASSERT_EQ(drv.cuLaunchHostFunc(s, record_step, &a), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuEventRecord(e, s), CUDA_SUCCESS);  // guessed: the same primary context
  ASSERT_EQ(drv.cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "a");
  // A created context's event is of another context.
  CUcontext made = nullptr;
  ASSERT_EQ(drv.cuCtxCreate(&made, nullptr, 0, 0), CUDA_SUCCESS);
  CUevent other = nullptr;
  ASSERT_EQ(drv.cuEventCreate(&other, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuEventRecord(other, s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(drv.cuGreenCtxRecordEvent(g, other), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(drv.cuCtxDestroy(made), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventDestroy(e), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(GreenContextTest, WaitEventOrdersAllLaterGreenWorkStreamsMadeLaterIncluded) {
  CUgreenCtx g = make_green(0);
  CUcontext gc = context_of(g);
  CUstream before = green_stream(g);
  CUstream producer = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&producer, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e = nullptr;
  ASSERT_EQ(drv.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  trace t;
  step a{&t, 'a'}, b{&t, 'b'}, x{&t, 'x'}, n{&t, 'n'}, c{&t, 'c'}, l{&t, 'l'};
  ASSERT_EQ(drv.cuLaunchHostFunc(producer, record_step, &a), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventRecord(e, producer), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuLaunchHostFunc(producer, record_step, &b), CUDA_SUCCESS);  // after the record
  ASSERT_EQ(drv.cuGreenCtxWaitEvent(g, e), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuLaunchHostFunc(before, record_step, &x), CUDA_SUCCESS);
  CUstream after = green_stream(g);  // made after the wait: starts behind it
  ASSERT_EQ(drv.cuLaunchHostFunc(after, record_step, &n), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamSynchronize(after), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "an");
  // So does a stream made by cuStreamCreate with the green context current.
  ASSERT_EQ(drv.cuCtxPushCurrent(gc), CUDA_SUCCESS);
  CUstream made = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&made, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuLaunchHostFunc(made, record_step, &c), CUDA_SUCCESS);
  launch_in(gc, nullptr, &l);
  ASSERT_EQ(drv.cuStreamSynchronize(before), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "anx");
  ASSERT_EQ(drv.cuStreamSynchronize(made), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "anxc");
  ASSERT_EQ(drv.cuCtxPushCurrent(gc), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "anxcl");  // 'b' came after the record: nothing waited for it
  ASSERT_EQ(drv.cuStreamSynchronize(producer), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "anxclb");
  for (CUstream s : {before, after, made, producer}) ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventDestroy(e), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(GreenContextTest, WaitEventTakesEventsOfAnyDeviceAndIgnoresUnrecordedOnes) {
  CUgreenCtx g = make_green(0);
  CUstream s = green_stream(g);
  CUevent never = nullptr;
  ASSERT_EQ(drv.cuEventCreate(&never, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuGreenCtxWaitEvent(g, never), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuStreamQuery(s), CUDA_SUCCESS);  // nothing queued
  CUcontext primary1 = nullptr;
  ASSERT_EQ(drv.cuDevicePrimaryCtxRetain(&primary1, 1), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxPushCurrent(primary1), CUDA_SUCCESS);
  trace t;
  step a{&t, 'a'}, b{&t, 'b'};
  CUevent e = nullptr;
  ASSERT_EQ(drv.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuLaunchHostFunc(CU_STREAM_LEGACY, record_step, &a), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventRecord(e, CU_STREAM_LEGACY), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxWaitEvent(g, e), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuLaunchHostFunc(s, record_step, &b), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(t.log, "ab");
  ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
  for (CUevent x : {never, e}) ASSERT_EQ(drv.cuEventDestroy(x), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxDestroy(g), CUDA_SUCCESS);
}

TEST_F(GreenContextTest, RecordAndWaitAreRefusedWhileAGreenStreamCaptures) {
  CUgreenCtx g = make_green(0);
  CUstream s = green_stream(g);
  CUevent e = nullptr;
  ASSERT_EQ(drv.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventRecord(e, nullptr), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuGreenCtxRecordEvent(g, e), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(drv.cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(graph, nullptr);
  ASSERT_EQ(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuGreenCtxWaitEvent(g, e), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(drv.cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(sim.violations(), 2);  // one per invalidated capture
  // An event recorded in a capture elsewhere: a wait on it is refused too.
  CUstream other = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamBeginCapture(other, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventRecord(e, other), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuGreenCtxWaitEvent(g, e), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(drv.cuStreamEndCapture(other, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // Nothing captures any more: both work again.
  ASSERT_EQ(drv.cuEventRecord(e, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuGreenCtxRecordEvent(g, e), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuGreenCtxWaitEvent(g, e), CUDA_SUCCESS);
  for (CUstream x : {s, other}) ASSERT_EQ(drv.cuStreamDestroy(x), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuEventDestroy(e), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxDestroy(g), CUDA_SUCCESS);
}

TEST_F(GreenContextTest, PrimaryContextSynchronizationAndSyncFreeCoverGreenWork) {
  CUgreenCtx g = make_green(0);
  CUcontext gc = context_of(g);
  CUstream s = green_stream(g);
  CUstream plain = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&plain, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  trace t;
  step a{&t, 'a'}, l{&t, 'l'}, p{&t, 'p'}, b{&t, 'b'}, f{&t, 'f'};
  ASSERT_EQ(drv.cuLaunchHostFunc(s, record_step, &a), CUDA_SUCCESS);
  launch_in(gc, nullptr, &l);
  ASSERT_EQ(drv.cuLaunchHostFunc(plain, record_step, &p), CUDA_SUCCESS);
  // With the green context current: only its own work.
  ASSERT_EQ(drv.cuCtxPushCurrent(gc), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxSynchronize(), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  std::string ran = t.log;
  std::sort(ran.begin(), ran.end());
  EXPECT_EQ(ran, "al");
  // With the primary current (documented): its green contexts' work too.
  ASSERT_EQ(drv.cuLaunchHostFunc(s, record_step, &b), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxSynchronize(), CUDA_SUCCESS);
  ran = t.log;
  std::sort(ran.begin(), ran.end());
  EXPECT_EQ(ran, "ablp");
  // A synchronous free waits for the device's green work as well.
  CUdeviceptr mem = alloc(256);
  ASSERT_EQ(drv.cuLaunchHostFunc(s, record_step, &f), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemFree(mem), CUDA_SUCCESS);
  EXPECT_EQ(t.log.back(), 'f');
  for (CUstream x : {s, plain}) ASSERT_EQ(drv.cuStreamDestroy(x), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxDestroy(g), CUDA_SUCCESS);
}

TEST_F(GreenContextTest, DestroyedGreenContextIsAnErrorToUseButItsQueuedWorkStillRuns) {
  CUgreenCtx g = make_green(0);
  CUcontext gc = context_of(g);
  CUstream s = green_stream(g);
  trace t;
  step a{&t, 'a'};
  ASSERT_EQ(drv.cuLaunchHostFunc(s, record_step, &a), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuGreenCtxDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuGreenCtxDestroy(g), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUcontext c = nullptr;
  EXPECT_EQ(drv.cuCtxFromGreenCtx(&c, g), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUstream more = nullptr;
  EXPECT_EQ(drv.cuGreenCtxStreamCreate(&more, g, CU_STREAM_NON_BLOCKING, 0), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(drv.cuCtxSetCurrent(gc), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(sim.violations(), 4);
  // Documented: its streams stay, but calls on them fail.
  EXPECT_EQ(drv.cuLaunchHostFunc(s, record_step, &a), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(drv.cuStreamDestroy(s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(t.log, "");
  sim.run_all();
  EXPECT_EQ(t.log, "a");
}

TEST_F(GreenContextTest, EntryPointsResolveThroughGetProcAddress) {
  for (char const* name :
       {"cuDeviceGetDevResource", "cuCtxGetDevResource", "cuGreenCtxGetDevResource", "cuDevSmResourceSplitByCount",
        "cuDevResourceGenerateDesc", "cuGreenCtxCreate", "cuGreenCtxDestroy", "cuCtxFromGreenCtx", "cuGreenCtxGetId",
        "cuGreenCtxStreamCreate", "cuStreamGetGreenCtx", "cuGreenCtxRecordEvent", "cuGreenCtxWaitEvent"}) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status{};
    ASSERT_EQ(drv.cuGetProcAddress(name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS) << name;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS) << name;
    EXPECT_EQ(fn, dlsym(drv.handle, name)) << name;
  }
  // cuGreenCtxStreamCreate came with CUDA 12.5.
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  ASSERT_EQ(drv.cuGetProcAddress("cuGreenCtxStreamCreate", &fn, 12040, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

}  // namespace
}  // namespace gpumem::test
