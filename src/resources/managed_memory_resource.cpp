#include <gpumem/managed_memory_resource.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/resource_errors.hpp>

namespace gpumem {

void* managed_memory_resource::do_allocate(std::size_t bytes, stream_ref /*stream: synchronous*/) {
  if (bytes == 0) return nullptr;
  if (CUresult r = detail::ensure_context(); r != CUDA_SUCCESS) {
    detail::throw_allocation_error(r, "cuMemAllocManaged", bytes);
  }
  CUdeviceptr p{};
  if (CUresult r = detail::driver().cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL); r != CUDA_SUCCESS) {
    detail::throw_allocation_error(r, "cuMemAllocManaged", bytes);
  }
  used_.fetch_add(bytes, std::memory_order_relaxed);
  return reinterpret_cast<void*>(p);
}

void managed_memory_resource::do_deallocate(void* p, std::size_t bytes, stream_ref /*stream*/) noexcept {
  if (p == nullptr) return;
  CUresult r = detail::ensure_context();
  if (r == CUDA_SUCCESS) r = detail::driver().cuMemFree(reinterpret_cast<CUdeviceptr>(p));
  if (r != CUDA_SUCCESS) {
    failed_frees_.fetch_add(1, std::memory_order_relaxed);
    detail::report_free_failure("cuMemFree_v2", r, p);
    return;
  }
  used_.fetch_sub(bytes, std::memory_order_relaxed);
}

resource_info managed_memory_resource::do_info() const {
  auto const used = used_.load(std::memory_order_relaxed);
  return resource_info{.reserved_bytes = used, .used_bytes = used, .free_bytes = 0, .largest_free_block = 0};
}

bool managed_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept {
  return dynamic_cast<managed_memory_resource const*>(&other) != nullptr;
}

}  // namespace gpumem
