#pragma once
// managed_memory_resource: unified memory from cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL),
// freed with cuMemFree_v2 — what cudaMallocManaged/cudaFree do. Streams, context
// and thread safety: detail/synchronous_memory_resource.hpp (streams are ignored;
// the memory is attached globally, so any stream and the host may access it).

#include <gpumem/detail/synchronous_memory_resource.hpp>

namespace gpumem {

class managed_memory_resource final : public detail::synchronous_memory_resource {
 public:
  managed_memory_resource() = default;

  /// Managed memory is also host-accessible.
  friend void get_property(managed_memory_resource const&, cuda::mr::host_accessible) noexcept {}

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;
};

}  // namespace gpumem
