#pragma once
// What cuda_memory_resource and managed_memory_resource share: a synchronous
// driver allocation, freed with cuMemFree_v2, with the bytes in use counted for
// info(). Internal to src/resources.

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/resource_errors.hpp>
#include <gpumem/device_memory_resource.hpp>

#include <atomic>
#include <cstddef>

namespace gpumem::detail {

/// Makes sure a context is current, then `alloc(&ptr)`; throws naming `call`.
template <class Alloc>
void* synchronous_allocate(Alloc&& alloc, const char* call, std::size_t bytes, std::atomic<std::size_t>& used) {
  if (bytes == 0) return nullptr;
  if (CUresult r = ensure_context(); r != CUDA_SUCCESS) throw_allocation_error(r, call, bytes);
  CUdeviceptr p{};
  if (CUresult r = alloc(&p); r != CUDA_SUCCESS) throw_allocation_error(r, call, bytes);
  used.fetch_add(bytes, std::memory_order_relaxed);
  return reinterpret_cast<void*>(p);
}

/// cuMemFree_v2 of `p`; a failure is counted in `failed` and reported (never thrown).
void synchronous_free(void* p, std::size_t bytes, std::atomic<std::size_t>& used,
                      std::atomic<std::size_t>& failed) noexcept;

/// reserved == used == bytes allocated and not yet freed: nothing is cached.
[[nodiscard]] resource_info synchronous_info(std::atomic<std::size_t> const& used) noexcept;

}  // namespace gpumem::detail
