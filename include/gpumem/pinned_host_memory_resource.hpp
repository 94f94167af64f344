#pragma once
// pinned_host_memory_resource: page-locked host memory, every allocation one
// cuMemHostAlloc with the resource's flag set, every free one cuMemFreeHost: what
// cudaHostAlloc/cudaMallocHost/cudaFreeHost do underneath.
//
// The memory is host memory that the GPU can reach (CU_MEMHOSTALLOC_DEVICEMAP:
// mapped; PORTABLE: pinned for every context; WRITECOMBINED: fast to copy from,
// slow for the CPU to read). Each allocation is one whole CUDA allocation, so
// cuMemHostGetFlags, cuMemHostGetDevicePointer and cuPointerGetAttributes answer
// for it as CUDA does.
//
// Streams: ignored (both calls are synchronous; cuMemFreeHost waits for the work
// of the context). Context: each call first makes sure the thread has a current
// context (device 0's primary context if none), as the runtime would; the memory
// belongs to that context.
// Thread safety: fully thread-safe; the only shared state is atomic counters.

#include <gpumem/device_memory_resource.hpp>

#include <atomic>
#include <cstddef>

namespace gpumem {

/// The flags cuMemHostAlloc accepts (PORTABLE | DEVICEMAP | WRITECOMBINED).
inline constexpr unsigned pinned_host_flag_mask = 0x7U;

class pinned_host_memory_resource final : public device_memory_resource {
 public:
  /// Throws logic_error for flags outside pinned_host_flag_mask.
  explicit pinned_host_memory_resource(unsigned flags = 0);

  [[nodiscard]] unsigned flags() const noexcept { return flags_; }
  /// Frees the driver rejected (deallocate cannot throw: counted, and reported once).
  [[nodiscard]] std::size_t failed_deallocations() const noexcept {
    return failed_frees_.load(std::memory_order_relaxed);
  }

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  /// reserved == used == bytes allocated now.
  [[nodiscard]] resource_info do_info() const override;
  /// Same flag set: either frees the other's memory the same way.
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  unsigned flags_;
  std::atomic<std::size_t> used_{0};
  std::atomic<std::size_t> failed_frees_{0};
};

}  // namespace gpumem
