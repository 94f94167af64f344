#pragma once
// A stream or a device going away: what the shim keeps about it is dropped before
// CUDA forgets it, so no pool, tracker or registry entry outlives its handle.
//
// Thread safety: every part told is thread-safe.

#include <cuda.h>

namespace gpumem::shim {

/// cudaStreamDestroy/cuStreamDestroy: tell every chain before the real destroy.
void notify_stream_destroyed(CUstream stream) noexcept;
/// cudaDeviceReset/cuDevicePrimaryCtxReset (`entry`): forget the device's
/// allocations and chain. The log gets a free row, named `entry`, for every
/// allocation the reset releases: the tools' books must end where the device's do.
void forget_device(int device, const char* entry) noexcept;

}  // namespace gpumem::shim
