#pragma once
// What a configuration says about a chain the process has one of, for memory that
// belongs to no single device's budget:
// - [host]: pinned host memory (cudaHostAlloc, cudaMallocHost, cuMemHostAlloc,
//   cuMemAllocHost and their frees). Environment: GPUMEM_HOST_POOL (on/off),
//   GPUMEM_HOST_LIMIT (a size).
// - [managed]: managed memory (cudaMallocManaged, cuMemAllocManaged and their
//   frees). Environment: GPUMEM_MANAGED_POOL, GPUMEM_MANAGED_LIMIT.

#include <cstddef>
#include <optional>

namespace gpumem::config {

struct process_chain_settings {
  /// Cache freed blocks (per_flag_pools_memory_resource). Off (the default): every
  /// call reaches CUDA, still counted, limited and logged. Opt-in because a pooled
  /// free returns at once, where CUDA's free first waits for the context's work,
  /// and a program may lean on that wait (to read on the host what a kernel wrote).
  bool pool = false;
  /// Most bytes the program may hold (the limit counts requests, not the pool's
  /// rounding); none: no cap.
  std::optional<std::size_t> limit;
  /// Most bytes each flag set's pool caches from CUDA; none: no cap.
  std::optional<std::size_t> pool_max;
};

}  // namespace gpumem::config
