#pragma once
// cuda_memory_resource: every allocation is one cuMemAlloc_v2, every free one
// cuMemFree_v2 — exactly what cudaMalloc/cudaFree do underneath. Streams, context
// and thread safety: detail/synchronous_memory_resource.hpp (streams are ignored;
// the memory is usable on any stream once allocate returns).

#include <gpumem/detail/synchronous_memory_resource.hpp>

namespace gpumem {

class cuda_memory_resource final : public detail::synchronous_memory_resource {
 public:
  cuda_memory_resource() = default;

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  /// Any two cuda_memory_resources can free each other's memory.
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;
};

}  // namespace gpumem
