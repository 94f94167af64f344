#include <gpumem/cuda_memory_resource.hpp>
#include <gpumem/detail/driver_api.hpp>

namespace gpumem {

void* cuda_memory_resource::do_allocate(std::size_t bytes, stream_ref /*stream: synchronous*/) {
  return allocate_with([](CUdeviceptr* p, std::size_t n) { return detail::driver().cuMemAlloc(p, n); }, "cuMemAlloc_v2",
                       bytes);
}

bool cuda_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept {
  return dynamic_cast<cuda_memory_resource const*>(&other) != nullptr;
}

}  // namespace gpumem
