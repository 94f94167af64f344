#pragma once
// Device memory the program creates itself through CUDA's virtual memory
// management (cuMemCreate / cuMemRelease), as XLA's allocator (JAX) and PyTorch's
// expandable segments do. gpumem cannot pool it (the program maps it where it
// wants), but it must not escape the user's controls:
// - a device's limit covers it: a cuMemCreate that would pass the limit is refused
//   with CUDA_ERROR_OUT_OF_MEMORY, as a pooled allocation would be;
// - a cuMemCreate that the device refuses for lack of memory first makes the
//   device's pool give back what it caches, then is tried once more;
// - every create and release is counted and logged (Entry "cuMemCreate" /
//   "cuMemRelease"; the Pointer column holds the allocation handle, the Size
//   column the bytes), and the exit report sums it per device;
// - cudaMemGetInfo under a limit counts it as in use.
// CUDA frees such memory once its handle is released AND every mapping of it is
// unmapped; programs often release the handle right after mapping it. So the
// charge (limit, counts) lasts until both: cuMemMap and cuMemUnmap are hooked to
// follow the mappings of the handles seen created.
// Memory created on the host (a location other than a device) is not device
// memory: handed to CUDA untouched. The limit lives in the device's chain, which a
// create builds only while the device's primary context is current (building it
// would otherwise retain that context, which the program never asked for): memory
// created in a context the program made, before any chain of that device existed,
// is counted and logged but not limited.
//
// Thread safety: any thread. The tables of handles and mappings share one mutex:
// creating and mapping physical memory are rare, slow driver calls. A program that
// maps a handle while another of its threads releases it may leave that memory
// uncounted from then on (CUDA's own answer to such a race is undefined).

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace gpumem::shim {

/// The real cuMemCreate with the limit, the retry and the record around it.
CUresult create_tracked(CUmemGenericAllocationHandle* handle, std::size_t bytes, CUmemAllocationProp const* prop,
                        unsigned long long flags) noexcept;
/// The real cuMemRelease; a tracked handle is forgotten once CUDA accepted the
/// release, and its charge given back if no mapping holds the memory.
CUresult release_tracked(CUmemGenericAllocationHandle handle) noexcept;
/// The real cuMemMap; a mapping of a tracked handle holds its charge.
CUresult map_tracked(CUdeviceptr ptr, std::size_t size, std::size_t offset, CUmemGenericAllocationHandle handle,
                     unsigned long long flags) noexcept;
/// The real cuMemUnmap; the mappings it ends stop holding their charges (the last
/// hold of a released handle gives its charge back).
CUresult unmap_tracked(CUdeviceptr ptr, std::size_t size) noexcept;

struct created_totals {
  std::uint64_t handles = 0;  ///< live now: not released, or still mapped
  std::size_t bytes = 0;      ///< live now
  std::size_t peak = 0;       ///< most bytes live at once
  std::uint64_t created = 0;  ///< handles ever created
};
/// What the program created on `device` (all zero for an ordinal out of range).
[[nodiscard]] created_totals created_on(int device) noexcept;

/// In a forked child: the parent's handles mean nothing there.
void reset_created_after_fork() noexcept;

}  // namespace gpumem::shim
