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
// Memory created on the host (a location other than a device) is not device
// memory: handed to CUDA untouched. The limit lives in the device's chain, which a
// create builds only while the device's primary context is current (building it
// would otherwise retain that context, which the program never asked for): memory
// created in a context the program made, before any chain of that device existed,
// is counted and logged but not limited.
//
// The limit is given back at cuMemRelease, even if a mapping still holds the
// memory until its cuMemUnmap (CUDA frees it only then).
//
// Thread safety: any thread. The table of handles has one mutex: creating
// physical memory is a rare, slow driver call.

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace gpumem::shim {

/// The real cuMemCreate with the limit, the retry and the record around it.
CUresult create_tracked(CUmemGenericAllocationHandle* handle, std::size_t bytes, CUmemAllocationProp const* prop,
                        unsigned long long flags) noexcept;
/// The real cuMemRelease; a tracked handle is forgotten (and its charge given back)
/// once CUDA accepted the release.
CUresult release_tracked(CUmemGenericAllocationHandle handle) noexcept;

struct created_totals {
  std::uint64_t handles = 0;  ///< live now
  std::size_t bytes = 0;      ///< live now
  std::size_t peak = 0;       ///< most bytes live at once
  std::uint64_t created = 0;  ///< handles ever created
};
/// What the program created on `device` (all zero for an ordinal out of range).
[[nodiscard]] created_totals created_on(int device) noexcept;

/// In a forked child: the parent's handles mean nothing there.
void reset_created_after_fork() noexcept;

}  // namespace gpumem::shim
