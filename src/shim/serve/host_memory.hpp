#pragma once
// Pinned host memory through gpumem: the host chain (process_chains.hpp) serving
// the pinned entry points, the pinned pointers it handed out with their sizes (a
// pinned free names no size), and the log rows of every pinned call.
//
// Thread safety: all functions are thread-safe; the table of handed-out pointers
// takes one mutex (pinned allocation is rare next to device allocation).

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace gpumem::shim {

/// Allocates `bytes` (> 0) of pinned memory with `flags` from the host chain.
/// CUDA's error for bad flags or out of memory; CUDA_ERROR_NOT_SUPPORTED when the
/// host chain is off, or no device's primary context is current (none, or one the
/// program created: its pinned memory dies with it), and the caller hands the call
/// to CUDA.
CUresult host_allocate(void** out, std::size_t bytes, unsigned flags, const char* entry) noexcept;

/// Outcome of a free of a pinned pointer.
enum class host_free_result {
  freed,    ///< it was the shim's and went back to the host chain
  refused,  ///< inside the shim's memory but not a live allocation: CUDA_ERROR_INVALID_VALUE
  not_ours  ///< hand it to CUDA
};
host_free_result host_free(void* p, const char* entry) noexcept;

/// Logs a pinned call handed to CUDA (registration, unpooled cases).
void note_host_passthrough(bool allocation, void* p, std::size_t bytes, const char* entry, CUresult r) noexcept;

/// In a forked child: the parent's process chains and pinned pointers are forgotten
/// (their blocks belong to the parent's CUDA contexts); the next call builds fresh ones.
void reset_host_after_fork() noexcept;

}  // namespace gpumem::shim
