#pragma once
// live_streams: the stream handles the program created through the shim's
// cuStreamCreate* hooks and has not destroyed, with the context and device each
// was created in. So a stream-ordered call on a destroyed or made-up handle gets
// CUDA's answer instead of being served, and a stream-ordered allocation is
// served on the stream's device, as CUDA serves it ("the allocation comes from
// the memory pool current to the stream's device"), whichever device is current.
//
// check(s): the special handles (0, legacy, per-thread) and live streams are valid
// at the cost of a thread-local compare (the answer is cached per thread until any
// stream is destroyed). A handle the shim never saw created (destroyed, garbage,
// created by cuGreenCtxStreamCreate, or created before the shim was active) is
// asked of the driver once per call (cuStreamGetFlags), which gives CUDA's own
// verdict; its home is not known.
//
// Thread safety: all members are thread-safe; lookups take a shared lock only on a
// per-thread cache miss.

#include <cuda.h>

namespace gpumem::shim {

/// Where a stream was created. device -1: not known (a special handle, or a
/// stream the shim did not see created): the current device is the stream's.
struct stream_home {
  CUcontext ctx = nullptr;  ///< the context current at its creation
  int device = -1;          ///< that context's device
  bool primary = false;     ///< ctx is the device's primary context (the one its chain serves)
};

/// A stream was created in `home`.
void stream_created(CUstream s, stream_home const& home) noexcept;
/// A stream is being destroyed.
void stream_gone(CUstream s) noexcept;
/// CUDA_SUCCESS if `s` names a stream a stream-ordered call may use, else the
/// driver's error for it (CUDA_ERROR_INVALID_HANDLE for a destroyed stream).
/// `home`, if given, receives where a live stream was created ({} otherwise).
[[nodiscard]] CUresult check_stream(CUstream s, stream_home* home = nullptr) noexcept;
/// Forked child: no streams survive.
void reset_streams_after_fork() noexcept;

}  // namespace gpumem::shim
