#pragma once
// async_memory_resource: stream-ordered allocation from a CUDA memory pool
// (cuMemAllocFromPoolAsync / cuMemFreeAsync) — what cudaMallocAsync does, on a
// pool this resource owns or on one it is given.
//
// Owned pool: created on the current device (device 0's primary context if the
// thread has none) with location = that device, handle type none. Its release
// threshold defaults to UINT64_MAX: the pool keeps every byte it has reserved
// across synchronizations (the driver's default of 0 would hand memory back at
// every sync, making steady-state allocation slow); release() trims it to zero.
// The destructor destroys an owned pool (a CUDA call: do not destroy an
// async_memory_resource from a static destructor or after the driver unloaded).
//
// Streams: allocate/deallocate are ordered on the given stream, with the driver's
// own cross-stream reuse rules (it inserts the dependencies).
// Thread safety: fully thread-safe; the driver serializes inside the pool.

#include <gpumem/device_memory_resource.hpp>

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <optional>

namespace gpumem {

class async_memory_resource final : public device_memory_resource {
 public:
  /// Creates and owns a pool on the current device.
  /// `release_threshold`: bytes the pool may keep reserved across synchronizations
  /// (none: UINT64_MAX, keep all). `initial_pool_size`: bytes reserved up front
  /// (one allocate + free on the legacy stream, then a synchronize).
  /// Throws cuda_error (CUDA_ERROR_NOT_SUPPORTED where the device has no memory
  /// pools), out_of_memory if the initial reservation does not fit.
  explicit async_memory_resource(std::optional<std::size_t> release_threshold = {},
                                 std::optional<std::size_t> initial_pool_size = {});

  /// Allocates from an existing pool (e.g. cuDeviceGetDefaultMemPool's), which
  /// this resource neither configures nor destroys. Throws logic_error on null.
  explicit async_memory_resource(CUmemoryPool pool);

  ~async_memory_resource() override;

  [[nodiscard]] CUmemoryPool pool_handle() const noexcept { return pool_; }
  [[nodiscard]] bool owns_pool() const noexcept { return owned_; }
  /// Frees the driver rejected (counted, reported on stderr).
  [[nodiscard]] std::size_t failed_deallocations() const noexcept {
    return failed_frees_.load(std::memory_order_relaxed);
  }

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  /// cuMemPoolTrimTo(pool, 0); returns the drop in reserved bytes.
  std::size_t do_release() override;
  /// From the pool's RESERVED_MEM_CURRENT / USED_MEM_CURRENT attributes
  /// (largest_free_block unknown: 0).
  [[nodiscard]] resource_info do_info() const override;
  /// Equal when allocating from the same pool.
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  CUmemoryPool pool_{};
  bool owned_{false};
  std::atomic<std::size_t> failed_frees_{0};
};

}  // namespace gpumem
