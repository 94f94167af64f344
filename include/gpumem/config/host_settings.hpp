#pragma once
// What a configuration says about pinned host memory (cudaHostAlloc, cudaMallocHost,
// cuMemHostAlloc, cuMemAllocHost and their frees): the host chain, one for the
// process (pinned memory belongs to no single device's budget).
// Environment: GPUMEM_HOST_POOL (on/off), GPUMEM_HOST_LIMIT (a size).

#include <cstddef>
#include <optional>

namespace gpumem::config {

struct host_settings {
  /// Cache pinned blocks (pinned_pools_memory_resource). Off (the default): every
  /// call reaches CUDA, still counted, limited and logged. Opt-in because a pooled
  /// free returns at once, where CUDA's cuMemFreeHost first waits for the context's
  /// work, and a program may lean on that wait.
  bool pool = false;
  /// Most bytes of pinned memory the program may hold (the limit counts requests,
  /// not the pool's rounding); none: no cap.
  std::optional<std::size_t> limit;
  /// Most bytes each flag set's pool caches from CUDA; none: no cap.
  std::optional<std::size_t> pool_max;
};

}  // namespace gpumem::config
