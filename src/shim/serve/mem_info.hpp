#pragma once
// The answer to cuMemGetInfo/cudaMemGetInfo while the shim serves a device: the
// memory its chain caches is free to the program, and a limit is the total.
//
// Thread safety: reads the chains' thread-safe statistics only.

#include <cuda.h>

#include <cstddef>

namespace gpumem::shim {

/// cuMemGetInfo as the pool sees it: cached free bytes count as free; with a limit,
/// total = limit and free = limit - in use. Either pointer may be null. Builds the
/// current device's chain if this is its first gpumem call (a broken configuration
/// stops the program here, as at a first allocation).
CUresult pool_mem_info(std::size_t* free_bytes, std::size_t* total_bytes) noexcept;

}  // namespace gpumem::shim
