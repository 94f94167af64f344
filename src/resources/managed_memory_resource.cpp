#include <gpumem/detail/driver_api.hpp>
#include <gpumem/error.hpp>
#include <gpumem/managed_memory_resource.hpp>

namespace gpumem {

managed_memory_resource::managed_memory_resource(unsigned attach) : attach_{attach} {
  if (!managed_attach_flag(attach)) {
    throw logic_error{
        "gpumem: managed memory is attached globally (CU_MEM_ATTACH_GLOBAL) or to the host "
        "(CU_MEM_ATTACH_HOST)"};
  }
}

void* managed_memory_resource::do_allocate(std::size_t bytes, stream_ref /*stream: synchronous*/) {
  driver_allocation const call =
      attach_ == CU_MEM_ATTACH_HOST
          ? +[](CUdeviceptr* p, std::size_t n) { return detail::driver().cuMemAllocManaged(p, n, CU_MEM_ATTACH_HOST); }
          : +[](CUdeviceptr* p, std::size_t n) {
              return detail::driver().cuMemAllocManaged(p, n, CU_MEM_ATTACH_GLOBAL);
            };
  return allocate_with(call, "cuMemAllocManaged", bytes);
}

bool managed_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept {
  auto const* m = dynamic_cast<managed_memory_resource const*>(&other);
  return m != nullptr && m->attach_ == attach_;
}

}  // namespace gpumem
