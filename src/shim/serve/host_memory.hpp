#pragma once
// Pinned host memory through gpumem: the host chain (statistics → limiting, when
// configured → pinned_pools_memory_resource: a pool per flag set and device), and
// the pinned pointers the shim handed out with their sizes, for their frees.
//
// One chain for the process, built on the first pinned allocation (no CUDA call:
// the pools make their contexts current when they grow). Never destroyed: frees
// may come during exit.
//
// Safe mode: a freed block is reused only once the GPU completed every copy queued
// before the free (pinned_pool_memory_resource.hpp). Stream mode trusts the program
// as RMM's pinned pool does.
//
// Thread safety: all functions are thread-safe; the table of handed-out pointers
// takes one mutex (pinned allocation is rare next to device allocation).

#include <gpumem/device_memory_resource.hpp>

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace gpumem::shim {

/// Allocates `bytes` (> 0) of pinned memory with `flags` from the host chain.
/// CUDA's error for bad flags, out of memory, or no context; CUDA_ERROR_NOT_SUPPORTED
/// when the host chain is off (the caller hands the call to CUDA).
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

/// What the host chain holds now, for reports and the query API.
struct host_totals {
  bool built = false;
  bool pooled = false;
  std::uint64_t allocations = 0, frees = 0, passthroughs = 0, fences = 0, waits = 0;
  resource_info info{};
  std::string description;  ///< "pinned pools (per flag set) → limit 1 GiB"
};
[[nodiscard]] host_totals host_chain_totals() noexcept;
/// The report's lines for the host chain (none when it was never built). No CUDA call.
void append_host_report(std::string& out);
/// In a forked child: the parent's host chain is forgotten (its pinned blocks belong
/// to the parent's CUDA context); the next pinned call builds a fresh one.
void reset_host_after_fork() noexcept;

}  // namespace gpumem::shim
