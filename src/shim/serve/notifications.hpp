#pragma once
// A stream or a device going away: what the shim keeps about it is dropped before
// CUDA forgets it, so no pool, tracker or registry entry outlives its handle.
//
// Thread safety: every part told is thread-safe.

#include <cuda.h>

namespace gpumem::shim {

/// cudaStreamDestroy/cuStreamDestroy: tell every chain before the real destroy.
void notify_stream_destroyed(CUstream stream) noexcept;
/// cudaDeviceReset/cuDevicePrimaryCtxReset: forget the device's allocations and chain.
void forget_device(int device) noexcept;

}  // namespace gpumem::shim
