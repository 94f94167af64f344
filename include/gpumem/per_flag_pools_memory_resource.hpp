#pragma once
// per_flag_pools_memory_resource: host-accessible memory (pinned host memory, or
// managed memory) for every flag set and device, each served by a
// pinned_pool_memory_resource of its own over an upstream making that kind of
// memory with those flags (pinned_host_memory_resource: cuMemHostAlloc;
// managed_memory_resource: cuMemAllocManaged). Keeping flag sets and devices apart
// is what makes CUDA's answers for a pooled block right: cuMemHostGetFlags gives
// the flags it was asked with, cuPointerGetAttributes the device (context) it was
// allocated on, and every block is one whole CUDA allocation, so cuMemAdvise and
// cuMemPrefetchAsync on it work as on the program's own.
//
// Which pool serves an allocation: the flags set for the calling thread with
// scoped_alloc_flags (0 when none: cudaMallocHost's flags, or for managed memory
// CU_MEM_ATTACH_GLOBAL, cudaMallocManaged's default), and the device set with them,
// else the device of the current context (device 0's primary context is made
// current if none is, as the runtime does). A free goes to the pool
// holding the pointer, whatever is current; an unknown pointer aborts in debug
// builds and is ignored in release builds. Pools are made on first use and live as
// long as this resource.
//
// Thread safety: every member is thread-safe. Finding a made pool is one atomic
// load; making one takes a mutex. A free, info() and owns() walk the pools made so
// far (usually one or two), not every (flags, device) slot.

#include <gpumem/device_memory_resource.hpp>
#include <gpumem/pinned_pool_memory_resource.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>

namespace gpumem {

/// What the calling thread's next allocation from a per_flag_pools_memory_resource
/// is for: its flags (cuMemHostAlloc's, or cuMemAllocManaged's attach flags), and
/// the device whose primary context is current, when the caller knows it already
/// (-1: the resource asks the driver).
struct alloc_target {
  unsigned flags = 0;
  int device = -1;
};
[[nodiscard]] inline alloc_target& current_alloc_target() noexcept {
  static thread_local alloc_target target;
  return target;
}

/// Sets the calling thread's allocation flags (and device) for one scope.
class scoped_alloc_flags {
 public:
  explicit scoped_alloc_flags(unsigned flags, int device = -1) noexcept : saved_{current_alloc_target()} {
    current_alloc_target() = {flags, device};
  }
  ~scoped_alloc_flags() { current_alloc_target() = saved_; }
  scoped_alloc_flags(scoped_alloc_flags const&) = delete;
  scoped_alloc_flags& operator=(scoped_alloc_flags const&) = delete;

 private:
  alloc_target saved_;
};

/// The memory a per_flag_pools_memory_resource serves.
enum class host_accessible_kind : bool {
  pinned,  ///< cuMemHostAlloc (flags: pinned_host_flag_mask)
  managed  ///< cuMemAllocManaged (flags: CU_MEM_ATTACH_GLOBAL or CU_MEM_ATTACH_HOST)
};

class per_flag_pools_memory_resource final : public device_memory_resource {
 public:
  static constexpr int max_devices = 64;
  static constexpr unsigned flag_sets = 8;

  /// `pooled` false: no caching, each call reaches CUDA's allocation and free.
  /// Makes no CUDA call.
  explicit per_flag_pools_memory_resource(host_accessible_kind kind, pinned_pool_options opts = {}, bool pooled = true);
  ~per_flag_pools_memory_resource() override;

  /// The pool of (flags, device) if made, else nullptr (or when not pooled).
  [[nodiscard]] pinned_pool_memory_resource* pool(unsigned flags, int device) const noexcept;
  [[nodiscard]] bool pooled() const noexcept { return pooled_; }
  [[nodiscard]] host_accessible_kind kind() const noexcept { return kind_; }
  /// The device's context was destroyed, and with it every block made on it: its
  /// pools are abandoned (never freed again), and from now on a free no pool holds
  /// is ignored (it was such a block) instead of asserting.
  void forget_device(int device) noexcept;
  /// Fences and host waits of every pool together.
  [[nodiscard]] std::size_t fence_count() const noexcept;
  [[nodiscard]] std::size_t wait_count() const noexcept;

 private:
  struct entry;
  /// Throws cuda_error (invalid value) for flags the kind does not take, and when
  /// no context can be made current.
  device_memory_resource& serving(alloc_target target);
  [[nodiscard]] device_memory_resource* holder(void const* p) const noexcept;
  template <class Fn>
  void for_each(Fn&& fn) const;

  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  std::size_t do_release() override;
  [[nodiscard]] resource_info do_info() const override;
  [[nodiscard]] bool do_owns(void const* p) const noexcept override;
  [[nodiscard]] bool do_deallocate_calls_driver() const noexcept override { return !pooled_ || opts_.wait_for_gpu; }

  host_accessible_kind kind_;
  pinned_pool_options opts_;
  bool pooled_;
  std::mutex make_mutex_;
  std::atomic<bool> forgot_{false};  ///< a device was forgotten: unknown frees may be its blocks
  static constexpr std::size_t slots = std::size_t{flag_sets} * max_devices;
  std::array<std::atomic<entry*>, slots> entries_{};  ///< by (device, flags); null once forgotten
  /// Every pool made, [0, made_count_) set; a forgotten one's place is reused.
  std::array<std::atomic<entry*>, slots> made_{};
  std::atomic<std::size_t> made_count_{0};
};

}  // namespace gpumem
