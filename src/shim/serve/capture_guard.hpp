#pragma once
// Stream capture: what the shim must never do while a capture is active.
//
// A device or stream synchronization, an event record on the capturing stream, or
// an allocation in global capture mode invalidates a capture (docs/cuda-semantics.md).
// The shim counts active captures (its cuStreamBeginCapture*/EndCapture hooks feed
// stream_tracker's process-wide counter, which also refuses reclamation barriers
// while any capture is active), and:
//  - runs every chain call with the thread's capture mode exchanged to relaxed, so a
//    pool growth (cuMemAlloc) in one thread does not break another's capture;
//  - passes stream-ordered allocations on a capturing stream to CUDA (graph memory);
//  - parks a chain block freed on a capturing stream until no capture is active;
//  - leaves to CUDA the cudaMalloc/cudaFree calls CUDA refuses during a capture.
//
// Thread safety: all functions are thread-safe.

#include <gpumem/stream_tracker.hpp>

#include <cuda.h>

#include <cstddef>

namespace gpumem::shim {

struct device_chain;

/// Whether the shim must leave `stream` (explicit handle: 0x2 for the per-thread
/// stream) to CUDA because it captures. No driver call while no capture is active
/// anywhere (the shim counts every capture begin). Otherwise
/// detail::stream_capture_state(), where `unknown` counts as capturing: a
/// stream-ordered allocation then goes to CUDA, which answers for its own streams
/// (graph memory for a capture, an error for a bad handle or an implicit capture
/// dependency), and a free on it is parked, never recorded on.
[[nodiscard]] bool stream_capturing(CUstream stream) noexcept;

/// Whether CUDA may refuse a potentially unsafe call (cudaMalloc, cudaFree and their
/// driver twins) from this thread now: a capture is active in the process and the
/// thread's capture interaction mode is not relaxed. CUDA then refuses the call
/// when the capture is this thread's own, or a global one of another thread (as
/// for a global-mode thread), and invalidates the capture. Such calls are CUDA's to
/// answer: served from a pool, an allocation on the capturing thread would let the
/// capture go on with memory the program then frees while the graph still uses
/// it. Two driver calls, only while a capture is active.
[[nodiscard]] bool thread_capture_mode_not_relaxed() noexcept;
[[nodiscard]] inline bool capture_may_refuse_unsafe_calls() noexcept {
  return stream_tracker::capture_active() && thread_capture_mode_not_relaxed();
}

/// CUDA's answer to a potentially unsafe call from this thread now, with its side
/// effects (an invalidated capture): a one-byte cuMemAlloc, freed at once when it
/// is allowed. CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: refused.
[[nodiscard]] CUresult unsafe_call_verdict() noexcept;

/// Exchanges the thread's capture mode to relaxed for a scope, only while a capture
/// is active.
class scoped_relaxed_capture {
 public:
  // Inline: every allocation and free makes one, and captures are rare.
  scoped_relaxed_capture() noexcept {
    if (stream_tracker::capture_active()) [[unlikely]]
      relax();
  }
  ~scoped_relaxed_capture() {
    if (exchanged_) [[unlikely]]
      restore();
  }
  scoped_relaxed_capture(scoped_relaxed_capture const&) = delete;
  scoped_relaxed_capture& operator=(scoped_relaxed_capture const&) = delete;
  /// Whether the thread's mode was relaxed before (or could not be exchanged).
  [[nodiscard]] bool was_relaxed() const noexcept { return !exchanged_ || saved_ == CU_STREAM_CAPTURE_MODE_RELAXED; }

 private:
  void relax() noexcept;
  void restore() noexcept;

  CUstreamCaptureMode saved_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool exchanged_ = false;
};

/// Keeps a chain block freed on a capturing stream until every capture ended.
/// `after` (optional, taken over): an event the chain's legacy stream must wait on
/// before the block is freed then (work of another device's stream).
void park_until_captures_end(void* p, std::size_t bytes, device_chain* chain, CUevent after = nullptr) noexcept;
/// Capture hook: the stream's capture ended (frees parked blocks once none is left).
/// Captures begin through stream_tracker::begin_capture().
void note_capture_ended() noexcept;
/// Forked child: nothing parked.
void reset_parked_blocks_after_fork() noexcept;

}  // namespace gpumem::shim
