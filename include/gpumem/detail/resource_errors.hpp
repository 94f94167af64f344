#pragma once
// Error reporting shared by the device resources (cuda, async, managed).
//
// Allocation failures become exceptions that name the driver call and the size;
// deallocation failures cannot throw (deallocate is noexcept), so they are counted
// by the resource and reported at error level through gpumem's diagnostics
// (diagnostics.hpp), rate-limited so a program that frees garbage in a loop cannot
// flood its own output.

#include <cuda.h>

#include <cstddef>

namespace gpumem::detail {

/// Throws out_of_memory for CUDA_ERROR_OUT_OF_MEMORY, cuda_error otherwise.
/// The message names `call` and `bytes`: "gpumem: cuMemAlloc_v2(4096 bytes): CUDA_ERROR_...".
[[noreturn]] void throw_allocation_error(CUresult r, const char* call, std::size_t bytes);

/// Reports a failed free (at most the first 16 per process, then a single
/// "further failures suppressed" line). Never throws, never allocates, takes no lock.
void report_free_failure(const char* call, CUresult r, void const* p) noexcept;

}  // namespace gpumem::detail
