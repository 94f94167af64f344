#pragma once
// managed_memory_resource: unified memory from cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL),
// freed with cuMemFree_v2 — what cudaMallocManaged/cudaFree do.
//
// Streams: ignored (both calls are synchronous; the memory is attached globally,
// so any stream and the host may access it).
// Thread safety: fully thread-safe; shared state is atomic counters only.

#include <gpumem/device_memory_resource.hpp>

#include <atomic>
#include <cstddef>

namespace gpumem {

class managed_memory_resource final : public device_memory_resource {
 public:
  managed_memory_resource() = default;
  ~managed_memory_resource() override = default;

  /// Frees the driver rejected (counted, reported on stderr; deallocate cannot throw).
  [[nodiscard]] std::size_t failed_deallocations() const noexcept {
    return failed_frees_.load(std::memory_order_relaxed);
  }

  /// Managed memory is also host-accessible.
  friend void get_property(managed_memory_resource const&, cuda::mr::host_accessible) noexcept {}

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  /// reserved == used == bytes currently allocated through this resource.
  [[nodiscard]] resource_info do_info() const override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  std::atomic<std::size_t> used_{0};
  std::atomic<std::size_t> failed_frees_{0};
};

}  // namespace gpumem
