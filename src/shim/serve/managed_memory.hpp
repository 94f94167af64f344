#pragma once
// Managed memory through gpumem: cuMemAllocManaged (and so cudaMallocManaged,
// whose runtime calls it) served from the managed chain (process_chains.hpp), each
// block registered as alloc_kind::managed_chain so that cudaFree/cuMemFree find it
// like any device pointer, and logged.
//
// What CUDA would answer itself is left to CUDA: odd arguments, no current
// context, a context the program created (pools serve primary contexts), and a
// call a stream capture may refuse.
//
// Every block is one whole cuMemAllocManaged allocation (the pool's size class of
// the request), so cudaMemAdvise, cudaMemPrefetchAsync, cudaMemRangeGetAttribute
// and cudaPointerGetAttributes on it work as on the program's own; the address
// range queries answer the request, as for device blocks.
//
// Thread safety: thread-safe (the chain and the registry are).

#include "observe/event_log.hpp"
#include "serve/allocation_registry.hpp"

#include <cuda.h>

#include <cstddef>

namespace gpumem::shim {

/// Serves cuMemAllocManaged. CUDA_ERROR_NOT_SUPPORTED: the call is CUDA's to answer
/// (see above, or the chain could not be built); the caller hands it to CUDA.
CUresult managed_allocate(CUdeviceptr* dptr, std::size_t bytes, unsigned flags, const char* entry) noexcept;

/// Frees block `p`, whose record `a` (kind managed_chain) was taken from the registry,
/// back to the managed chain; logs it.
CUresult managed_free(void* p, allocation const& a, CUstream stream, const char* entry, event_start start) noexcept;

}  // namespace gpumem::shim
