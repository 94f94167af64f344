#pragma once
// stream_tracker: the streams of one device, and a device-wide barrier that orders
// all later GPU work after all earlier GPU work WITHOUT blocking the host.
//
// Why: real cudaFree/cuMemFree synchronize the device, so a program may free a
// block that a kernel on any stream still uses, and memory from cudaMalloc may be
// used at once on any stream. A pool that hands such a block out again must make
// sure the new owner's work cannot start before the old owner's work finished.
// Synchronizing the device does that but drains the GPU's queue; barrier() does it
// on the GPU side:
//   1. every tracked non-blocking stream S records an event E_S, and the legacy
//      stream L waits on each E_S (and on the last event of every stream destroyed
//      since the previous barrier, and on any extra events the caller passes);
//   2. L records E_L. E_L now follows all work submitted so far to every stream:
//      blocking streams (created without CU_STREAM_NON_BLOCKING, per-thread
//      default streams of every thread) because L waits for them implicitly, the
//      others through step 1;
//   3. every tracked non-blocking stream waits on E_L. Later work on blocking
//      streams waits for L implicitly; a non-blocking stream created later waits on
//      E_L when stream_created() registers it.
// Step 1 skips a non-blocking stream whose work has all run (cuStreamQuery): it
// cannot touch a block freed before the barrier any more.
// Green contexts (cuGreenCtxCreate: a share of the device's SMs that uses the
// primary context's memory) have streams of their own, their default stream
// included, that nothing in the primary context orders. A barrier covers each one
// whole: cuGreenCtxRecordEvent(G, E_G) and L waits on E_G in step 1,
// cuGreenCtxWaitEvent(G, E_L) in step 3 (all of G's later work, on any of its
// streams, follows E_L).
// After barrier() returns true, any block freed (on the host) before the call may
// be handed to any new owner on any stream at once. Cost, for k non-blocking
// streams of which b have work queued, and g green contexts: k queries,
// 2b + k + 3g + 1 other driver calls, no host wait; on the GPU it joins the
// streams once, as a device synchronization would (which real cudaFree does on
// every call).
//
// Soundness depends on knowing every non-blocking stream of the device's primary
// context and every green context of the device: the shim registers each stream
// from its cuStreamCreate* hooks (the runtime creates streams through them too) and
// each green context from its cuGreenCtxCreate hook, and unregisters them from its
// cuStreamDestroy and cuGreenCtxDestroy hooks. A library user who frees with
// synchronous semantics and runs work on non-blocking streams or in green contexts
// must register them the same way.
//
// Captures: while any stream capture is active in the process a barrier is
// refused (barrier() returns false and changes nothing): recording on a capturing
// stream would become part of its graph, and touching the legacy stream while a
// blocking stream captures invalidates the capture. Captures begun through
// begin_capture() are serialised against barriers, so none starts mid-barrier.
//
// Contexts: a tracker serves the PRIMARY context of its device (the one the pool's
// memory lives in) and the green contexts made from it; barrier() makes the primary
// current for the duration if another context is current, and restores the
// caller's. Streams of contexts made with cuCtxCreate are not tracked (the shim
// does not pool memory allocated there).
//
// Thread safety: every member is thread-safe. One process-wide mutex serialises
// barriers, stream registration and capture begins (all rare next to allocations).
// No member blocks on the GPU.

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

namespace gpumem {

class stream_tracker {
 public:
  static constexpr int max_devices = 64;

  /// The tracker of `device` (0 <= device < max_devices; others get a tracker that
  /// refuses every barrier). Never destroyed: frees may arrive during exit.
  [[nodiscard]] static stream_tracker& of(int device) noexcept;

  /// Registers a stream just created in this device's primary context. `flags` are
  /// the cuStreamCreate flags (CU_STREAM_NON_BLOCKING matters). A non-blocking
  /// stream created after a barrier is made to wait on that barrier's event.
  void stream_created(CUstream stream, unsigned flags) noexcept;
  /// Call before the stream is destroyed: its last work is remembered (one event)
  /// until the next barrier has waited for it. Unknown streams are ignored.
  void stream_destroying(CUstream stream) noexcept;
  /// Registers a green context just made on this device (cuGreenCtxCreate). One
  /// made after a barrier is made to wait on that barrier's event: memory reused
  /// behind it may still be touched by older work.
  void green_context_created(CUgreenCtx green) noexcept;
  /// Call before the green context is destroyed: its last work is remembered (one
  /// event) until the next barrier has waited for it. Returns whether it was
  /// registered here (unknown ones are ignored).
  bool green_context_destroying(CUgreenCtx green) noexcept;
  /// The primary context was reset (cudaDeviceReset): every stream and event of it
  /// is gone, and so are the green contexts made from it.
  void context_reset() noexcept;

  /// Whether a barrier orders `stream`'s work: the legacy and per-thread default
  /// streams, registered streams, blocking streams of the primary context (through
  /// the legacy stream) and streams of registered green contexts. Not covered: an
  /// unregistered non-blocking stream, and streams of other contexts and devices.
  [[nodiscard]] bool covers(CUstream stream) noexcept;

  /// Whether `ctx` is this device's primary context (retains it once, on first use).
  [[nodiscard]] bool is_primary(CUcontext ctx) noexcept;

  /// The barrier described above. Returns false, having assumed nothing, when a
  /// capture is active, no driver is loaded, or a driver call failed. `also_after`:
  /// extra events (of any context) that E_L must follow.
  [[nodiscard]] bool barrier(std::span<CUevent const> also_after = {}) noexcept;

  /// Whether all work submitted before the last barrier has run on the GPU (its
  /// E_L completed), so that memory the barrier made reusable may also be unmapped.
  /// `wait`: block the host until it has (cuEventSynchronize). True when no barrier
  /// was made yet; false during a capture, or when the driver fails.
  [[nodiscard]] bool last_barrier_complete(bool wait) noexcept;

  /// Barriers made so far on this device (successful ones).
  [[nodiscard]] std::uint64_t barrier_count() const noexcept;
  /// Streams registered now (blocking and non-blocking).
  [[nodiscard]] std::size_t stream_count() const noexcept;
  /// The non-blocking ones among them: each costs a barrier a query and a wait,
  /// and two calls more when it has work queued.
  [[nodiscard]] std::size_t non_blocking_stream_count() const noexcept;
  /// Green contexts registered now: three calls each per barrier.
  [[nodiscard]] std::size_t green_context_count() const noexcept;
  /// The most driver calls besides queries a barrier would make now, every
  /// non-blocking stream busy: 2k + 3g + 1 (1 before any registration).
  [[nodiscard]] std::size_t barrier_calls() const noexcept;

  // -- Stream capture, process-wide -------------------------------------------------
  /// Runs `begin` (a cuStreamBeginCapture* call returning CUresult) so that no
  /// barrier runs concurrently, and counts the capture if it returns success.
  template <class Begin>
  static CUresult begin_capture(Begin&& begin) noexcept {
    lock_captures();
    CUresult const r = begin();
    unlock_captures(r == CUDA_SUCCESS);
    return r;
  }
  /// A capture ended (EndCapture, or its stream was destroyed). Never below zero.
  static void capture_ended() noexcept;
  /// Asked on every allocation and free: one load, inline.
  [[nodiscard]] static bool capture_active() noexcept { return active_captures.load(std::memory_order_acquire) > 0; }
  [[nodiscard]] static long capture_count() noexcept { return active_captures.load(std::memory_order_acquire); }

  /// Forked child: no streams, no captures, fresh locks (the parent's GPU state is
  /// not the child's).
  static void reset_after_fork() noexcept;

  stream_tracker(stream_tracker const&) = delete;
  stream_tracker& operator=(stream_tracker const&) = delete;

  struct state;  // implementation detail (stream_tracker.cpp)

 private:
  explicit stream_tracker(int device) noexcept : device_{device} {}
  static void lock_captures() noexcept;
  static void unlock_captures(bool began) noexcept;
  /// The state, created if needed; nullptr when out of host memory. Caller holds
  /// the process-wide mutex.
  state* ensure_state() noexcept;

  /// Captures begun and not yet ended, process-wide (zero-initialised before any
  /// constructor runs).
  static constinit inline std::atomic<long> active_captures{0};

  int device_;
  std::atomic<state*> state_{nullptr};  ///< created on first use, under the process-wide mutex
};

}  // namespace gpumem
