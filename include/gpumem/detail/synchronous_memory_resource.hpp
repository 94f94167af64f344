#pragma once
// synchronous_memory_resource: what cuda_memory_resource and managed_memory_resource
// share. Each allocation is one synchronous driver call, each free one cuMemFree_v2;
// nothing is cached, and the bytes in use are counted for info().
//
// Streams: ignored. Both calls are synchronous (cuMemFree waits for the device), so
// the memory is usable on any stream once allocate returns.
// Context: each call first makes sure the thread has a current context (device 0's
// primary context if none), as the CUDA runtime would.
// Thread safety: fully thread-safe; the only shared state is atomic counters.

#include <gpumem/device_memory_resource.hpp>

#include <cuda.h>

#include <atomic>
#include <cstddef>

namespace gpumem::detail {

class synchronous_memory_resource : public device_memory_resource {
 public:
  /// Frees the driver rejected (deallocate cannot throw, so they are counted here
  /// and reported on stderr).
  [[nodiscard]] std::size_t failed_deallocations() const noexcept {
    return failed_frees_.load(std::memory_order_relaxed);
  }

 protected:
  synchronous_memory_resource() = default;
  ~synchronous_memory_resource() override = default;

  using driver_allocation = CUresult (*)(CUdeviceptr* out, std::size_t bytes);
  /// allocate(0) is nullptr; else `call(&ptr, bytes)` once a context is current.
  /// Throws the error the driver's result means, naming `name` (the driver call).
  void* allocate_with(driver_allocation call, char const* name, std::size_t bytes);

 private:
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept final;
  /// reserved == used == bytes currently allocated through this resource.
  [[nodiscard]] resource_info do_info() const final;

  std::atomic<std::size_t> used_{0};
  std::atomic<std::size_t> failed_frees_{0};
};

}  // namespace gpumem::detail
