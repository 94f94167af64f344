#pragma once
// The chains the process has one of, for host-accessible memory that belongs to no
// single device's budget: pinned host memory ([host], host_memory.hpp) and managed
// memory ([managed], managed_memory.hpp). Each is statistics → limiting (when
// configured) → per_flag_pools_memory_resource: a pool per flag set and device
// when `pool` is on, else each call reaching CUDA.
//
// A chain is built on its first allocation (no CUDA call: the pools make their
// contexts current when they grow) and never destroyed: frees may come during exit.
//
// Safe mode: a freed block is reused only once the GPU completed the work queued
// before the free (pinned_pool_memory_resource.hpp): the host can touch both kinds
// of memory directly, so a GPU-side barrier alone would not do. Stream mode trusts
// the program, as RMM's pinned pool does.
//
// Thread safety: all functions are thread-safe; finding a built chain is one
// acquire load.

#include "observe/event_log.hpp"

#include <gpumem/device_memory_resource.hpp>

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::shim {

enum class process_memory : std::uint8_t { pinned, managed };

/// Allocates `bytes` (> 0) with `flags` (cuMemHostAlloc's, or cuMemAllocManaged's
/// attach flag) from the chain of `which`, built if needed, for `device`, whose
/// primary context is current. CUDA's error for bad flags or out of memory (the
/// limit included); CUDA_ERROR_NOT_SUPPORTED when the chain cannot be built (the
/// caller hands the call to CUDA). Counts; does not log.
CUresult process_allocate(process_memory which, void** out, std::size_t bytes, unsigned flags, int device,
                          const char* entry) noexcept;
/// Gives back a block process_allocate handed out (`bytes` as asked). Counts.
void process_deallocate(process_memory which, void* p, std::size_t bytes, const char* entry) noexcept;
/// `p` inside memory the chain of `which` holds (in use, waiting or cached).
[[nodiscard]] bool process_chain_owns(process_memory which, void const* p) noexcept;
/// Logs a call of that memory when a log or call stacks are on (otherwise does
/// nothing, not even the lookups): its row's Reserved is the chain's, and
/// `device` < 0 names the current context's device.
void log_process_event(process_memory which, log_action action, void const* p, std::size_t bytes, CUstream stream,
                       int device, const char* entry, CUresult r, event_start start) noexcept;
/// Counts a call of that memory handed to CUDA instead.
void count_process_passthrough(process_memory which) noexcept;

/// What a chain holds now, for reports and the query API.
struct process_totals {
  bool built = false;
  bool pooled = false;
  std::uint64_t allocations = 0, frees = 0, passthroughs = 0, fences = 0, waits = 0;
  resource_info info{};
  std::string description;  ///< "limiting(1 GiB) → pinned pool per flag set and device"
};
[[nodiscard]] process_totals process_chain_totals(process_memory which) noexcept;
/// What the chain of `which` holds from CUDA now (a log row's Reserved); 0 before
/// it is built.
[[nodiscard]] std::int64_t process_chain_reserved(process_memory which) noexcept;
/// The report's lines for each chain built (none for a chain never built). No CUDA call.
void append_process_chain_reports(std::string& out);
/// A reset of `device` (its primary context destroyed, and with it every block the
/// chains made on it): their pools forget those blocks, and the managed blocks the
/// program still held (`dead_managed`: pointer, requested bytes) count as freed for
/// the managed chain's limit and statistics when it pools (unpooled, they stay
/// counted). A pooled pinned block the program frees later counts then.
void forget_process_memory(int device, std::vector<std::pair<void*, std::size_t>> const& dead_managed) noexcept;
/// In a forked child: the parent's chains are forgotten (their blocks belong to the
/// parent's CUDA contexts); the next call builds fresh ones.
void reset_process_chains_after_fork() noexcept;

}  // namespace gpumem::shim
