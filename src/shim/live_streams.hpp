#pragma once
// live_streams: the stream handles the program created through the shim's
// cuStreamCreate* hooks and has not destroyed, so a stream-ordered call on a
// destroyed or made-up handle gets CUDA's answer instead of being served.
//
// check(s): the special handles (0, legacy, per-thread) and live streams are valid
// at the cost of a thread-local compare (the answer is cached per thread until any
// stream is destroyed). A handle the shim never saw created (destroyed, garbage,
// or created before the shim was active) is asked of the driver once per call
// (cuStreamGetFlags), which gives CUDA's own verdict.
//
// Thread safety: all members are thread-safe; lookups take a shared lock only on a
// per-thread cache miss.

#include <cuda.h>

namespace gpumem::shim {

/// A stream was created (any context).
void stream_created(CUstream s) noexcept;
/// A stream is being destroyed.
void stream_gone(CUstream s) noexcept;
/// CUDA_SUCCESS if `s` names a stream a stream-ordered call may use, else the
/// driver's error for it (CUDA_ERROR_INVALID_HANDLE for a destroyed stream).
[[nodiscard]] CUresult check_stream(CUstream s) noexcept;
/// Forked child: no streams survive.
void reset_streams_after_fork() noexcept;

}  // namespace gpumem::shim
