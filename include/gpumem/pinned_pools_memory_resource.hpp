#pragma once
// pinned_pools_memory_resource: pinned host memory for every flag set and device,
// each served by a pinned_pool_memory_resource of its own over a
// pinned_host_memory_resource with those flags. Keeping flag sets and devices apart
// is what makes CUDA's answers for a pooled block right: cuMemHostGetFlags gives the
// flags it was asked with, cuPointerGetAttributes the device (context) it was
// allocated on.
//
// Which pool serves an allocation: the flags set for the calling thread with
// scoped_pinned_flags (0 when none, cudaMallocHost's), and the device of the
// current context (device 0's primary context is made current if none is, as the
// runtime does). A free goes to the pool holding the pointer, whatever is current;
// an unknown pointer aborts in debug builds and is ignored in release builds.
// Pools are made on first use and live as long as this resource.
//
// Thread safety: every member is thread-safe. Finding a made pool is one atomic
// load; making one takes a mutex.

#include <gpumem/device_memory_resource.hpp>
#include <gpumem/pinned_pool_memory_resource.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>

namespace gpumem {

/// The cuMemHostAlloc flags of the calling thread's next pinned allocation.
[[nodiscard]] inline unsigned& pinned_alloc_flags() noexcept {
  static thread_local unsigned flags = 0;
  return flags;
}

/// Sets the calling thread's pinned allocation flags for one scope.
class scoped_pinned_flags {
 public:
  explicit scoped_pinned_flags(unsigned flags) noexcept : saved_{pinned_alloc_flags()} { pinned_alloc_flags() = flags; }
  ~scoped_pinned_flags() { pinned_alloc_flags() = saved_; }
  scoped_pinned_flags(scoped_pinned_flags const&) = delete;
  scoped_pinned_flags& operator=(scoped_pinned_flags const&) = delete;

 private:
  unsigned saved_;
};

class pinned_pools_memory_resource final : public device_memory_resource {
 public:
  static constexpr int max_devices = 64;
  static constexpr unsigned flag_sets = 8;

  /// `pooled` false: no caching, each call reaches cuMemHostAlloc/cuMemFreeHost.
  /// Makes no CUDA call.
  explicit pinned_pools_memory_resource(pinned_pool_options opts = {}, bool pooled = true);
  ~pinned_pools_memory_resource() override;

  /// The pool of (flags, device) if made, else nullptr (or when not pooled).
  [[nodiscard]] pinned_pool_memory_resource* pool(unsigned flags, int device) const noexcept;
  [[nodiscard]] bool pooled() const noexcept { return pooled_; }
  /// Fences and host waits of every pool together.
  [[nodiscard]] std::size_t fence_count() const noexcept;
  [[nodiscard]] std::size_t wait_count() const noexcept;

 private:
  struct entry;
  /// Throws logic_error for flags outside pinned_host_flag_mask, cuda_error when
  /// no context can be made current.
  device_memory_resource& serving(unsigned flags);
  [[nodiscard]] device_memory_resource* holder(void const* p) const noexcept;
  template <class Fn>
  void for_each(Fn&& fn) const;

  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  std::size_t do_release() override;
  [[nodiscard]] resource_info do_info() const override;
  [[nodiscard]] bool do_owns(void const* p) const noexcept override;
  [[nodiscard]] bool do_deallocate_calls_driver() const noexcept override { return !pooled_ || opts_.wait_for_gpu; }

  pinned_pool_options opts_;
  bool pooled_;
  std::mutex make_mutex_;
  std::array<std::atomic<entry*>, std::size_t{flag_sets} * max_devices> entries_{};
};

}  // namespace gpumem
