#include "synchronous_driver_calls.hpp"

#include <gpumem/cuda_memory_resource.hpp>

namespace gpumem {

void* cuda_memory_resource::do_allocate(std::size_t bytes, stream_ref /*stream: synchronous*/) {
  return detail::synchronous_allocate([bytes](CUdeviceptr* p) { return detail::driver().cuMemAlloc(p, bytes); },
                                      "cuMemAlloc_v2", bytes, used_);
}

void cuda_memory_resource::do_deallocate(void* p, std::size_t bytes, stream_ref /*stream*/) noexcept {
  detail::synchronous_free(p, bytes, used_, failed_frees_);
}

resource_info cuda_memory_resource::do_info() const { return detail::synchronous_info(used_); }

bool cuda_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept {
  return dynamic_cast<cuda_memory_resource const*>(&other) != nullptr;
}

}  // namespace gpumem
