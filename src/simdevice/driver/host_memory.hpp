#pragma once
// Page-locked host memory of the simulated device: cuMemHostAlloc and
// cuMemAllocHost allocations, and ranges registered with cuMemHostRegister.
// Plain aligned host memory stands in for pinned pages; what the simulation keeps
// is what the pointer queries answer (flags, owning context, range).
//
// Thread safety: one mutex guards both tables.

#include "memory.hpp"

#include <cstdint>

namespace gpumemsim {

/// Fills `out` (host = true, its flags in host_flags) for a pointer inside a
/// live pinned allocation or registered range; false otherwise.
bool host_lookup(std::uintptr_t ptr, pointer_info* out);

}  // namespace gpumemsim
