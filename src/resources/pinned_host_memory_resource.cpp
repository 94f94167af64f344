#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/resource_errors.hpp>
#include <gpumem/pinned_host_memory_resource.hpp>

namespace gpumem {

pinned_host_memory_resource::pinned_host_memory_resource(unsigned flags) : flags_{flags} {
  if ((flags & ~pinned_host_flag_mask) != 0) throw logic_error{"gpumem: unknown cuMemHostAlloc flags"};
}

void* pinned_host_memory_resource::do_allocate(std::size_t bytes, stream_ref /*stream: synchronous*/) {
  if (bytes == 0) return nullptr;
  if (CUresult r = detail::ensure_context(); r != CUDA_SUCCESS)
    detail::throw_allocation_error(r, "cuMemHostAlloc", bytes);
  auto const& d = detail::driver();
  if (d.cuMemHostAlloc == nullptr) detail::throw_allocation_error(CUDA_ERROR_NOT_SUPPORTED, "cuMemHostAlloc", bytes);
  void* p = nullptr;
  if (CUresult r = d.cuMemHostAlloc(&p, bytes, flags_); r != CUDA_SUCCESS)
    detail::throw_allocation_error(r, "cuMemHostAlloc", bytes);
  used_.fetch_add(bytes, std::memory_order_relaxed);
  return p;
}

void pinned_host_memory_resource::do_deallocate(void* p, std::size_t bytes, stream_ref /*stream*/) noexcept {
  if (p == nullptr) return;
  CUresult r = detail::ensure_context();
  if (r == CUDA_SUCCESS) {
    auto const& d = detail::driver();
    r = d.cuMemFreeHost != nullptr ? d.cuMemFreeHost(p) : CUDA_ERROR_NOT_SUPPORTED;
  }
  if (r != CUDA_SUCCESS) {
    failed_frees_.fetch_add(1, std::memory_order_relaxed);
    detail::report_free_failure("cuMemFreeHost", r, p);
    return;
  }
  used_.fetch_sub(bytes, std::memory_order_relaxed);
}

resource_info pinned_host_memory_resource::do_info() const {
  auto const u = used_.load(std::memory_order_relaxed);
  return resource_info{.reserved_bytes = u, .used_bytes = u};
}

bool pinned_host_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept {
  auto const* o = dynamic_cast<pinned_host_memory_resource const*>(&other);
  return o != nullptr && o->flags_ == flags_;
}

}  // namespace gpumem
