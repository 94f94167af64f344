// stream_tracker: the device-wide GPU-side barrier. On the simulated device queued
// work runs only when something synchronizes, so "B's later work runs after A's
// earlier work" is checked by synchronizing B alone and looking at what ran.

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/stream_tracker.hpp>

#include <support/sim_control.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <atomic>
#include <deque>
#include <vector>

namespace gpumem {
namespace {

class StreamTracker : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::sim_control::get().present() || !detail::driver_available()) {
      GTEST_SKIP() << "needs the simulated device (queued work must wait for a synchronization)";
    }
    ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
    device_ = detail::current_device();
    ASSERT_GE(device_, 0);
  }
  void TearDown() override {
    auto const& d = detail::driver();
    for (CUstream s : streams_) {
      tracker().stream_destroying(s);
      EXPECT_EQ(d.cuStreamSynchronize(s), CUDA_SUCCESS);
      EXPECT_EQ(d.cuStreamDestroy(s), CUDA_SUCCESS);
    }
    test::sim_control::get().run_all();
  }

  stream_tracker& tracker() { return stream_tracker::of(device_); }

  /// A stream created (and registered, unless `track` is false) like the shim does.
  CUstream make(unsigned flags, bool track = true) {
    CUstream s = nullptr;
    EXPECT_EQ(detail::driver().cuStreamCreate(&s, flags), CUDA_SUCCESS);
    if (track) tracker().stream_created(s, flags);
    streams_.push_back(s);
    return s;
  }

  /// Queues a host function that sets `flag`.
  static void mark(CUstream s, std::atomic<bool>& flag) {
    ASSERT_EQ(detail::driver().cuLaunchHostFunc(
                  s, [](void* f) { static_cast<std::atomic<bool>*>(f)->store(true); }, &flag),
              CUDA_SUCCESS);
  }
  /// Queues a host function that records whether `before` had run when it ran.
  static void check_after(CUstream s, std::atomic<bool> const& before, std::atomic<int>& seen) {
    struct arg {
      std::atomic<bool> const* before;
      std::atomic<int>* seen;
    };
    auto* a = new arg{&before, &seen};
    ASSERT_EQ(detail::driver().cuLaunchHostFunc(
                  s,
                  [](void* p) {
                    auto* x = static_cast<arg*>(p);
                    x->seen->store(x->before->load() ? 1 : 0);
                    delete x;
                  },
                  a),
              CUDA_SUCCESS);
  }

  /// Flags the queued functions write: members, so they outlive the test body
  /// (TearDown synchronizes the streams, which runs what is still queued).
  std::atomic<bool>& new_flag() { return bools_.emplace_back(false); }
  std::atomic<int>& new_seen() { return ints_.emplace_back(-1); }

  int device_ = -1;
  std::vector<CUstream> streams_;
  std::deque<std::atomic<bool>> bools_;
  std::deque<std::atomic<int>> ints_;
};

TEST_F(StreamTracker, WithoutABarrierNonBlockingStreamsRunInAnyOrder) {
  // The premise of every other test: nothing orders two non-blocking streams.
  CUstream a = make(CU_STREAM_NON_BLOCKING);
  CUstream b = make(CU_STREAM_NON_BLOCKING);
  auto& old_work = new_flag();
  auto& seen = new_seen();
  mark(a, old_work);
  check_after(b, old_work, seen);
  ASSERT_EQ(detail::driver().cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(seen.load(), 0);  // b's work ran while a's earlier work had not
}

TEST_F(StreamTracker, BarrierOrdersLaterWorkOnEveryStreamAfterEarlierWork) {
  CUstream a = make(CU_STREAM_NON_BLOCKING);
  CUstream b = make(CU_STREAM_NON_BLOCKING);
  CUstream blocking = make(0);
  auto& old_work = new_flag();
  mark(a, old_work);
  auto const before = tracker().barrier_count();
  ASSERT_TRUE(tracker().barrier());
  EXPECT_EQ(tracker().barrier_count(), before + 1);
  for (CUstream later : {b, blocking, static_cast<CUstream>(CU_STREAM_LEGACY)}) {
    auto& seen = new_seen();
    check_after(later, old_work, seen);
    ASSERT_EQ(detail::driver().cuStreamSynchronize(later), CUDA_SUCCESS);
    EXPECT_EQ(seen.load(), 1) << "later work ran before earlier work of another stream";
  }
}

// A non-blocking stream whose work has all run cannot touch a freed block: the
// barrier records no event on it (one on the busy stream, one on the legacy
// stream), yet later work on it still follows the busy stream's earlier work.
TEST_F(StreamTracker, AnIdleStreamCostsNoEventYetIsStillOrdered) {
  CUstream idle = make(CU_STREAM_NON_BLOCKING);
  CUstream busy = make(CU_STREAM_NON_BLOCKING);
  // Idle indeed: after an earlier barrier (another test in this process) a new
  // stream starts with a wait on it, which the simulated device runs only when asked.
  ASSERT_EQ(detail::driver().cuStreamSynchronize(idle), CUDA_SUCCESS);
  auto& old_work = new_flag();
  mark(busy, old_work);
  auto& sim = test::sim_control::get();
  auto const records = sim.call_count("cuEventRecord");
  ASSERT_TRUE(tracker().barrier());
  EXPECT_EQ(sim.call_count("cuEventRecord") - records, 2);
  auto& seen = new_seen();
  check_after(idle, old_work, seen);
  ASSERT_EQ(detail::driver().cuStreamSynchronize(idle), CUDA_SUCCESS);
  EXPECT_EQ(seen.load(), 1) << "later work on the idle stream ran before the busy stream's earlier work";
}

TEST_F(StreamTracker, BarrierCoversBlockingStreamsWithoutRegistration) {
  CUstream blocking = make(0, /*track=*/false);
  CUstream b = make(CU_STREAM_NON_BLOCKING);
  auto& old_work = new_flag();
  mark(blocking, old_work);
  ASSERT_TRUE(tracker().barrier());
  auto& seen = new_seen();
  check_after(b, old_work, seen);
  ASSERT_EQ(detail::driver().cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(seen.load(), 1);
}

TEST_F(StreamTracker, AStreamCreatedAfterABarrierWaitsForIt) {
  CUstream a = make(CU_STREAM_NON_BLOCKING);
  auto& old_work = new_flag();
  mark(a, old_work);
  ASSERT_TRUE(tracker().barrier());
  CUstream fresh = make(CU_STREAM_NON_BLOCKING);  // created after the barrier
  auto& seen = new_seen();
  check_after(fresh, old_work, seen);
  ASSERT_EQ(detail::driver().cuStreamSynchronize(fresh), CUDA_SUCCESS);
  EXPECT_EQ(seen.load(), 1);
}

TEST_F(StreamTracker, ADestroyedStreamsLastWorkIsCoveredByTheNextBarrier) {
  auto const& d = detail::driver();
  CUstream a = nullptr;
  ASSERT_EQ(d.cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  tracker().stream_created(a, CU_STREAM_NON_BLOCKING);
  CUstream b = make(CU_STREAM_NON_BLOCKING);
  auto& old_work = new_flag();
  mark(a, old_work);
  tracker().stream_destroying(a);
  ASSERT_EQ(d.cuStreamDestroy(a), CUDA_SUCCESS);  // its work is still queued
  ASSERT_TRUE(tracker().barrier());
  auto& seen = new_seen();
  check_after(b, old_work, seen);
  ASSERT_EQ(d.cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(seen.load(), 1);
}

// A program that creates and destroys streams in a loop and frees nothing makes
// no barrier: the ends of destroyed streams' work that has run must not pile up
// (one event each, for the life of the process) until a barrier that never comes.
TEST_F(StreamTracker, DestroyedStreamsWhoseWorkRanKeepNoEventUntilTheNextBarrier) {
  auto const& d = detail::driver();
  auto& sim = test::sim_control::get();
  ASSERT_TRUE(tracker().barrier());  // nothing retired from earlier tests
  auto const live_events = [&] {
    return sim.call_count("cuEventCreate") - sim.call_count("cuEventDestroy") - sim.call_count("cuEventDestroy_v2");
  };
  long const before = live_events();
  for (int i = 0; i < 2000; ++i) {
    CUstream s = nullptr;
    ASSERT_EQ(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    tracker().stream_created(s, CU_STREAM_NON_BLOCKING);
    auto& work = new_flag();
    mark(s, work);
    tracker().stream_destroying(s);
    ASSERT_EQ(d.cuStreamDestroy(s), CUDA_SUCCESS);
    sim.run_all();  // its work, and the event recorded after it, have run
  }
  EXPECT_LE(live_events() - before, 128);
  // A destroyed stream whose work is still queued is still covered.
  CUstream a = nullptr;
  ASSERT_EQ(d.cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  tracker().stream_created(a, CU_STREAM_NON_BLOCKING);
  CUstream b = make(CU_STREAM_NON_BLOCKING);
  auto& old_work = new_flag();
  mark(a, old_work);
  tracker().stream_destroying(a);
  ASSERT_EQ(d.cuStreamDestroy(a), CUDA_SUCCESS);
  for (int i = 0; i < 300; ++i) {  // sweeps meanwhile must keep a's event
    CUstream s = nullptr;
    ASSERT_EQ(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    tracker().stream_created(s, CU_STREAM_NON_BLOCKING);
    tracker().stream_destroying(s);
    ASSERT_EQ(d.cuStreamDestroy(s), CUDA_SUCCESS);
  }
  ASSERT_TRUE(tracker().barrier());
  auto& seen = new_seen();
  check_after(b, old_work, seen);
  ASSERT_EQ(d.cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(seen.load(), 1);
}

TEST_F(StreamTracker, RefusedWhileACaptureIsActive) {
  CUstream c = make(CU_STREAM_NON_BLOCKING);
  auto& sim = test::sim_control::get();
  // The counter is what refuses barriers; the shim's capture hooks feed it.
  ASSERT_EQ(stream_tracker::begin_capture([] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_TRUE(stream_tracker::capture_active());
  long const records = sim.call_count("cuEventRecord");
  long const waits = sim.call_count("cuStreamWaitEvent");
  EXPECT_FALSE(tracker().barrier());
  EXPECT_EQ(sim.call_count("cuEventRecord"), records);  // nothing touched while capturing
  EXPECT_EQ(sim.call_count("cuStreamWaitEvent"), waits);
  stream_tracker::capture_ended();
  EXPECT_FALSE(stream_tracker::capture_active());
  stream_tracker::capture_ended();  // never below zero
  EXPECT_EQ(stream_tracker::capture_count(), 0);
  EXPECT_TRUE(tracker().barrier());
  (void)c;
}

TEST_F(StreamTracker, AFailedCaptureBeginIsNotCounted) {
  EXPECT_EQ(stream_tracker::begin_capture([] { return CUDA_ERROR_INVALID_VALUE; }), CUDA_ERROR_INVALID_VALUE);
  EXPECT_FALSE(stream_tracker::capture_active());
}

TEST_F(StreamTracker, CountsRegisteredStreamsAndTheNonBlockingOnes) {
  auto const all = tracker().stream_count();
  auto const non_blocking = tracker().non_blocking_stream_count();
  CUstream a = make(CU_STREAM_NON_BLOCKING);
  make(CU_STREAM_NON_BLOCKING);
  make(0);
  make(CU_STREAM_NON_BLOCKING, /*track=*/false);
  EXPECT_EQ(tracker().stream_count(), all + 3);
  EXPECT_EQ(tracker().non_blocking_stream_count(), non_blocking + 2);
  tracker().stream_destroying(a);  // as the shim's destroy hook; TearDown destroys it
  EXPECT_EQ(tracker().stream_count(), all + 2);
  EXPECT_EQ(tracker().non_blocking_stream_count(), non_blocking + 1);
  EXPECT_EQ(tracker().barrier_calls(),
            2 * tracker().non_blocking_stream_count() + 3 * tracker().green_context_count() + 1);
}

TEST_F(StreamTracker, CoversRegisteredBlockingAndDefaultStreamsOnly) {
  CUstream known = make(CU_STREAM_NON_BLOCKING);
  CUstream unknown = make(CU_STREAM_NON_BLOCKING, /*track=*/false);
  CUstream blocking = make(0, /*track=*/false);
  EXPECT_TRUE(tracker().covers(known));
  EXPECT_FALSE(tracker().covers(unknown));  // the barrier cannot order what it does not know
  EXPECT_TRUE(tracker().covers(blocking));
  EXPECT_TRUE(tracker().covers(nullptr));
  EXPECT_TRUE(tracker().covers(CU_STREAM_LEGACY));
  EXPECT_TRUE(tracker().covers(CU_STREAM_PER_THREAD));
}

// The legacy stream orders the blocking streams of its own context only: a blocking
// stream of a context made by cuCtxCreate (or of another device) is not covered.
TEST_F(StreamTracker, ABlockingStreamOfAnotherContextIsNotCovered) {
  auto const& d = detail::driver();
  using create_fn = CUresult (*)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice);
  using destroy_fn = CUresult (*)(CUcontext);
  auto const create = reinterpret_cast<create_fn>(dlsym(d.handle, "cuCtxCreate_v4"));
  auto const destroy = reinterpret_cast<destroy_fn>(dlsym(d.handle, "cuCtxDestroy_v2"));
  ASSERT_NE(create, nullptr);
  ASSERT_NE(destroy, nullptr);
  CUcontext primary = nullptr;
  ASSERT_EQ(d.cuCtxGetCurrent(&primary), CUDA_SUCCESS);
  CUcontext own = nullptr;
  ASSERT_EQ(create(&own, nullptr, 0, static_cast<CUdevice>(device_)), CUDA_SUCCESS);  // now current
  CUstream theirs = nullptr;
  ASSERT_EQ(d.cuStreamCreate(&theirs, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.cuCtxSetCurrent(primary), CUDA_SUCCESS);
  CUstream mine = make(0, /*track=*/false);
  EXPECT_TRUE(tracker().covers(mine));
  EXPECT_FALSE(tracker().covers(theirs));
  EXPECT_EQ(d.cuStreamDestroy(theirs), CUDA_SUCCESS);
  EXPECT_EQ(destroy(own), CUDA_SUCCESS);
  EXPECT_EQ(d.cuCtxSetCurrent(primary), CUDA_SUCCESS);
}

TEST_F(StreamTracker, TheBarrierRestoresTheCallersContext) {
  auto const& d = detail::driver();
  CUcontext before = nullptr;
  ASSERT_EQ(d.cuCtxGetCurrent(&before), CUDA_SUCCESS);
  // No context: the tracker uses the primary one. (Setting none pops the thread's
  // context stack, which earlier tests in this process may have left deeper.)
  CUcontext c = before;
  for (int pops = 0; c != nullptr && pops < 16; ++pops) {
    ASSERT_EQ(d.cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
    ASSERT_EQ(d.cuCtxGetCurrent(&c), CUDA_SUCCESS);
  }
  ASSERT_EQ(c, nullptr);
  EXPECT_TRUE(tracker().barrier());
  CUcontext after = before;
  ASSERT_EQ(d.cuCtxGetCurrent(&after), CUDA_SUCCESS);
  EXPECT_EQ(after, nullptr);
  ASSERT_EQ(d.cuCtxSetCurrent(before), CUDA_SUCCESS);
}

// ---- green contexts: streams of their own, the pools' memory all the same ----------

/// A green context of half the simulated device's SMs, its streams and the driver
/// calls the tests make that gpumem itself never needs.
class StreamTrackerGreen : public StreamTracker {
 protected:
  void SetUp() override {
    StreamTracker::SetUp();
    if (IsSkipped()) return;
    lib_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(lib_, nullptr);
    green_ = make_green(/*track=*/true);
  }
  void TearDown() override {
    auto const& d = detail::driver();
    for (CUstream s : green_streams_) {
      tracker().stream_destroying(s);
      EXPECT_EQ(d.cuStreamSynchronize(s), CUDA_SUCCESS);
      EXPECT_EQ(d.cuStreamDestroy(s), CUDA_SUCCESS);
    }
    for (CUgreenCtx g : greens_) {
      tracker().green_context_destroying(g);
      EXPECT_EQ(fn<decltype(&cuGreenCtxDestroy)>("cuGreenCtxDestroy")(g), CUDA_SUCCESS);
    }
    StreamTracker::TearDown();
  }

  template <class F>
  F fn(char const* name) {
    auto* f = reinterpret_cast<F>(dlsym(lib_, name));
    EXPECT_NE(f, nullptr) << name;
    return f;
  }

  CUgreenCtx make_green(bool track) {
    CUdevResource sms{};
    CUdevResource part{};
    unsigned groups = 1;
    CUdevResourceDesc desc = nullptr;
    CUgreenCtx g = nullptr;
    EXPECT_EQ(fn<decltype(&cuDeviceGetDevResource)>("cuDeviceGetDevResource")(device_, &sms, CU_DEV_RESOURCE_TYPE_SM),
              CUDA_SUCCESS);
    EXPECT_EQ(fn<decltype(&cuDevSmResourceSplitByCount)>("cuDevSmResourceSplitByCount")(&part, &groups, &sms, nullptr,
                                                                                        0, sms.sm.smCount / 2),
              CUDA_SUCCESS);
    EXPECT_EQ(fn<decltype(&cuDevResourceGenerateDesc)>("cuDevResourceGenerateDesc")(&desc, &part, 1), CUDA_SUCCESS);
    EXPECT_EQ(fn<decltype(&cuGreenCtxCreate)>("cuGreenCtxCreate")(&g, desc, device_, CU_GREEN_CTX_DEFAULT_STREAM),
              CUDA_SUCCESS);
    if (track) tracker().green_context_created(g);
    greens_.push_back(g);
    return g;
  }
  CUstream green_stream(CUgreenCtx g) {
    CUstream s = nullptr;
    EXPECT_EQ(fn<decltype(&cuGreenCtxStreamCreate)>("cuGreenCtxStreamCreate")(&s, g, CU_STREAM_NON_BLOCKING, 0),
              CUDA_SUCCESS);
    green_streams_.push_back(s);
    return s;
  }
  /// Runs `f` with the green context `g` current (its default stream is then
  /// CU_STREAM_LEGACY), the caller's context restored after.
  template <class F>
  void in_green(CUgreenCtx g, F&& f) {
    auto const& d = detail::driver();
    CUcontext saved = nullptr;
    CUcontext ctx = nullptr;
    ASSERT_EQ(d.cuCtxGetCurrent(&saved), CUDA_SUCCESS);
    ASSERT_EQ(fn<decltype(&cuCtxFromGreenCtx)>("cuCtxFromGreenCtx")(&ctx, g), CUDA_SUCCESS);
    ASSERT_EQ(d.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    f();
    ASSERT_EQ(d.cuCtxSetCurrent(saved), CUDA_SUCCESS);
  }

  void* lib_ = nullptr;
  CUgreenCtx green_ = nullptr;
  std::vector<CUgreenCtx> greens_;
  std::vector<CUstream> green_streams_;
};

TEST_F(StreamTrackerGreen, AGreenContextNobodyRegisteredIsNotOrdered) {
  // The premise: work in a green context is ordered by nothing of the primary's.
  CUgreenCtx unknown = make_green(/*track=*/false);
  CUstream gs = green_stream(unknown);
  CUstream b = make(CU_STREAM_NON_BLOCKING);
  auto& old_work = new_flag();
  mark(gs, old_work);
  ASSERT_TRUE(tracker().barrier());
  auto& seen = new_seen();
  check_after(b, old_work, seen);
  ASSERT_EQ(detail::driver().cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(seen.load(), 0);
}

TEST_F(StreamTrackerGreen, BarrierOrdersLaterWorkAfterEveryStreamOfAGreenContext) {
  auto const& d = detail::driver();
  CUstream gs = green_stream(green_);
  CUstream blocking = nullptr;  // made while the green context is current: its stream
  in_green(green_, [&] { ASSERT_EQ(d.cuStreamCreate(&blocking, 0), CUDA_SUCCESS); });
  green_streams_.push_back(blocking);
  CUstream b = make(CU_STREAM_NON_BLOCKING);
  auto& on_stream = new_flag();
  auto& on_blocking = new_flag();
  auto& on_default = new_flag();
  mark(gs, on_stream);
  mark(blocking, on_blocking);
  in_green(green_, [&] { mark(CU_STREAM_LEGACY, on_default); });
  ASSERT_TRUE(tracker().barrier());
  for (auto* old_work : {&on_stream, &on_blocking, &on_default}) {
    auto& seen = new_seen();
    check_after(b, *old_work, seen);
    ASSERT_EQ(d.cuStreamSynchronize(b), CUDA_SUCCESS);
    EXPECT_EQ(seen.load(), 1) << "later work overtook a green context's earlier work";
  }
}

TEST_F(StreamTrackerGreen, AGreenContextsLaterWorkFollowsTheBarrier) {
  auto const& d = detail::driver();
  CUstream a = make(CU_STREAM_NON_BLOCKING);
  CUstream gs = green_stream(green_);  // made before the barrier
  auto& old_work = new_flag();
  mark(a, old_work);
  ASSERT_TRUE(tracker().barrier());
  auto& seen = new_seen();
  check_after(gs, old_work, seen);
  ASSERT_EQ(d.cuStreamSynchronize(gs), CUDA_SUCCESS);
  EXPECT_EQ(seen.load(), 1);
  auto& seen_default = new_seen();
  in_green(green_, [&] {
    check_after(CU_STREAM_LEGACY, old_work, seen_default);
    ASSERT_EQ(d.cuStreamSynchronize(CU_STREAM_LEGACY), CUDA_SUCCESS);
  });
  EXPECT_EQ(seen_default.load(), 1);
}

TEST_F(StreamTrackerGreen, AGreenContextMadeAfterABarrierWaitsForIt) {
  CUstream a = make(CU_STREAM_NON_BLOCKING);
  auto& old_work = new_flag();
  mark(a, old_work);
  ASSERT_TRUE(tracker().barrier());
  CUstream gs = green_stream(make_green(/*track=*/true));
  auto& seen = new_seen();
  check_after(gs, old_work, seen);
  ASSERT_EQ(detail::driver().cuStreamSynchronize(gs), CUDA_SUCCESS);
  EXPECT_EQ(seen.load(), 1);
}

TEST_F(StreamTrackerGreen, ADestroyedGreenStreamsLastWorkIsCoveredByTheNextBarrier) {
  auto const& d = detail::driver();
  CUstream gs = nullptr;
  ASSERT_EQ(fn<decltype(&cuGreenCtxStreamCreate)>("cuGreenCtxStreamCreate")(&gs, green_, CU_STREAM_NON_BLOCKING, 0),
            CUDA_SUCCESS);
  CUstream b = make(CU_STREAM_NON_BLOCKING);
  auto& old_work = new_flag();
  mark(gs, old_work);
  tracker().stream_destroying(gs);  // as the shim's destroy hook
  ASSERT_EQ(d.cuStreamDestroy(gs), CUDA_SUCCESS);
  ASSERT_TRUE(tracker().barrier());
  auto& seen = new_seen();
  check_after(b, old_work, seen);
  ASSERT_EQ(d.cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(seen.load(), 1);
}

TEST_F(StreamTrackerGreen, ADestroyedGreenContextsLastWorkIsCoveredByTheNextBarrier) {
  auto const& d = detail::driver();
  CUgreenCtx doomed = make_green(/*track=*/true);
  greens_.pop_back();  // destroyed here
  CUstream b = make(CU_STREAM_NON_BLOCKING);
  auto& old_work = new_flag();
  in_green(doomed, [&] { mark(CU_STREAM_LEGACY, old_work); });
  auto const greens = tracker().green_context_count();
  tracker().green_context_destroying(doomed);
  EXPECT_EQ(tracker().green_context_count(), greens - 1);
  ASSERT_EQ(fn<decltype(&cuGreenCtxDestroy)>("cuGreenCtxDestroy")(doomed), CUDA_SUCCESS);
  ASSERT_TRUE(tracker().barrier());
  auto& seen = new_seen();
  check_after(b, old_work, seen);
  ASSERT_EQ(d.cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(seen.load(), 1);
}

TEST_F(StreamTrackerGreen, AGreenContextDestroyedDuringACaptureStopsTheBarriers) {
  // Its record could invalidate the capture, so none is made; without it no barrier
  // knows the end of that context's work.
  auto& sim = test::sim_control::get();
  CUgreenCtx doomed = make_green(/*track=*/true);
  greens_.pop_back();  // destroyed here
  ASSERT_EQ(stream_tracker::begin_capture([] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  long const records = sim.call_count("cuGreenCtxRecordEvent");
  tracker().green_context_destroying(doomed);
  EXPECT_EQ(sim.call_count("cuGreenCtxRecordEvent"), records);
  ASSERT_EQ(fn<decltype(&cuGreenCtxDestroy)>("cuGreenCtxDestroy")(doomed), CUDA_SUCCESS);
  stream_tracker::capture_ended();
  EXPECT_FALSE(tracker().barrier());
  tracker().context_reset();  // what ends it (cudaDeviceReset); later tests need barriers
  EXPECT_TRUE(tracker().barrier());
}

TEST_F(StreamTrackerGreen, CoversTheStreamsOfRegisteredGreenContextsOnly) {
  CUstream mine = green_stream(green_);
  CUstream theirs = green_stream(make_green(/*track=*/false));
  EXPECT_TRUE(tracker().covers(mine));     // its stream-ordered frees may go behind a barrier
  EXPECT_FALSE(tracker().covers(theirs));  // nothing orders a green context nobody registered
}

TEST_F(StreamTrackerGreen, EachGreenContextCostsABarrierThreeCalls) {
  auto& sim = test::sim_control::get();
  EXPECT_GE(tracker().green_context_count(), 1U);
  EXPECT_EQ(tracker().barrier_calls(),
            2 * tracker().non_blocking_stream_count() + 3 * tracker().green_context_count() + 1);
  long const records = sim.call_count("cuGreenCtxRecordEvent");
  long const waits = sim.call_count("cuGreenCtxWaitEvent");
  ASSERT_TRUE(tracker().barrier());
  EXPECT_EQ(sim.call_count("cuGreenCtxRecordEvent") - records, static_cast<long>(tracker().green_context_count()));
  EXPECT_EQ(sim.call_count("cuGreenCtxWaitEvent") - waits, static_cast<long>(tracker().green_context_count()));
}

TEST(StreamTrackerBounds, OutOfRangeDevicesRefuseEveryBarrier) {
  EXPECT_FALSE(stream_tracker::of(-1).barrier());
  EXPECT_FALSE(stream_tracker::of(stream_tracker::max_devices).barrier());
  EXPECT_FALSE(stream_tracker::of(-1).is_primary(nullptr));
}

TEST(StreamTrackerDevices, DestroyingAStreamOfAnotherDeviceKeepsItsBarriers) {
  // A program destroying device 1's stream while device 0 is current: the end of the
  // stream's work is recorded in device 1's context, and device 1 keeps its barriers.
  auto& sim = test::sim_control::get();
  if (!sim.present() || !detail::driver_available()) GTEST_SKIP() << "needs the simulated device";
  auto const& d = detail::driver();
  int count = 0;
  ASSERT_EQ(d.cuDeviceGetCount(&count), CUDA_SUCCESS);
  if (count < 2) GTEST_SKIP() << "needs two simulated devices";
  CUcontext c0 = nullptr;
  CUcontext c1 = nullptr;
  ASSERT_EQ(d.cuDevicePrimaryCtxRetain(&c0, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
  ASSERT_EQ(d.cuCtxSetCurrent(c1), CUDA_SUCCESS);
  auto& t1 = stream_tracker::of(1);
  ASSERT_TRUE(t1.barrier());
  CUstream s = nullptr;
  ASSERT_EQ(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  t1.stream_created(s, CU_STREAM_NON_BLOCKING);
  ASSERT_EQ(d.cuCtxSetCurrent(c0), CUDA_SUCCESS);
  t1.stream_destroying(s);
  ASSERT_EQ(d.cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_TRUE(t1.barrier());
  sim.run_all();
}

}  // namespace
}  // namespace gpumem
