#pragma once
// cuda_memory_resource: every allocation is one cuMemAlloc_v2, every free one
// cuMemFree_v2 — exactly what cudaMalloc/cudaFree do underneath.
//
// Streams: ignored. cuMemAlloc/cuMemFree are synchronous (cuMemFree waits for the
// device), so the memory is usable on any stream once allocate returns.
// Thread safety: fully thread-safe; the only shared state is a few atomic
// counters (used bytes for info(), failed frees).
// Context: each call first makes sure the thread has a current context (device
// 0's primary context if none), as the CUDA runtime would.

#include <gpumem/device_memory_resource.hpp>

#include <atomic>
#include <cstddef>

namespace gpumem {

class cuda_memory_resource final : public device_memory_resource {
 public:
  cuda_memory_resource() = default;
  ~cuda_memory_resource() override = default;

  /// Frees the driver rejected (deallocate cannot throw, so they are counted here
  /// and reported on stderr).
  [[nodiscard]] std::size_t failed_deallocations() const noexcept {
    return failed_frees_.load(std::memory_order_relaxed);
  }

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  /// reserved == used == bytes currently allocated through this resource.
  [[nodiscard]] resource_info do_info() const override;
  /// Any two cuda_memory_resources can free each other's memory.
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  std::atomic<std::size_t> used_{0};
  std::atomic<std::size_t> failed_frees_{0};
};

}  // namespace gpumem
