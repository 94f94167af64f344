#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/resource_errors.hpp>
#include <gpumem/detail/synchronous_memory_resource.hpp>

namespace gpumem::detail {

void* synchronous_memory_resource::allocate_with(driver_allocation call, char const* name, std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (CUresult r = ensure_context(); r != CUDA_SUCCESS) throw_allocation_error(r, name, bytes);
  CUdeviceptr p{};
  if (CUresult r = call(&p, bytes); r != CUDA_SUCCESS) throw_allocation_error(r, name, bytes);
  used_.fetch_add(bytes, std::memory_order_relaxed);
  return reinterpret_cast<void*>(p);
}

void synchronous_memory_resource::do_deallocate(void* p, std::size_t bytes, stream_ref /*stream*/) noexcept {
  if (p == nullptr) return;
  CUresult r = ensure_context();
  if (r == CUDA_SUCCESS) r = driver().cuMemFree(reinterpret_cast<CUdeviceptr>(p));
  if (r != CUDA_SUCCESS) {
    failed_frees_.fetch_add(1, std::memory_order_relaxed);
    report_free_failure("cuMemFree_v2", r, p);
    return;
  }
  used_.fetch_sub(bytes, std::memory_order_relaxed);
}

resource_info synchronous_memory_resource::do_info() const {
  auto const u = used_.load(std::memory_order_relaxed);
  return resource_info{.reserved_bytes = u, .used_bytes = u, .free_bytes = 0, .largest_free_block = 0};
}

}  // namespace gpumem::detail
