#include <gpumem/detail/driver_api.hpp>
#include <gpumem/managed_memory_resource.hpp>

namespace gpumem {

void* managed_memory_resource::do_allocate(std::size_t bytes, stream_ref /*stream: synchronous*/) {
  return allocate_with(
      [](CUdeviceptr* p, std::size_t n) { return detail::driver().cuMemAllocManaged(p, n, CU_MEM_ATTACH_GLOBAL); },
      "cuMemAllocManaged", bytes);
}

bool managed_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept {
  return dynamic_cast<managed_memory_resource const*>(&other) != nullptr;
}

}  // namespace gpumem
