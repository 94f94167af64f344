#pragma once
// managed_memory_resource: unified memory from cuMemAllocManaged with one attach
// flag (CU_MEM_ATTACH_GLOBAL by default, or CU_MEM_ATTACH_HOST), freed with
// cuMemFree_v2: what cudaMallocManaged/cudaFree do. Streams, context and thread
// safety: detail/synchronous_memory_resource.hpp (streams are ignored; globally
// attached memory may be accessed from any stream and the host).

#include <gpumem/detail/synchronous_memory_resource.hpp>

#include <cuda.h>

namespace gpumem {

/// The attach flags cuMemAllocManaged takes (exactly one of them).
[[nodiscard]] constexpr bool managed_attach_flag(unsigned flags) noexcept {
  return flags == CU_MEM_ATTACH_GLOBAL || flags == CU_MEM_ATTACH_HOST;
}

class managed_memory_resource final : public detail::synchronous_memory_resource {
 public:
  /// Throws logic_error for an attach flag other than CU_MEM_ATTACH_GLOBAL or
  /// CU_MEM_ATTACH_HOST.
  explicit managed_memory_resource(unsigned attach = CU_MEM_ATTACH_GLOBAL);

  [[nodiscard]] unsigned attach() const noexcept { return attach_; }

  /// Managed memory is also host-accessible.
  friend void get_property(managed_memory_resource const&, cuda::mr::host_accessible) noexcept {}

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  /// Same attach flag: either frees the other's memory (cuMemFree either way).
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  unsigned attach_;
};

}  // namespace gpumem
