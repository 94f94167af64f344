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
//
// Synchronous calls (call_context::synchronous; the shim's safe mode): the
// driver's cross-stream rules only order the legacy stream, not the non-blocking
// stream a program may use cudaMalloc's memory on. So with an owned pool:
// - a synchronous allocation comes from a second pool of this resource (created at
//   the first such allocation) that reuses
//   only frees the driver has seen complete (opportunistic reuse; no event or
//   internal dependencies): fresh memory or memory no queued work touches;
// - a synchronous free waits, on the host side only, in a pending list; once the
//   pending bytes pass 1/32 of what both pools reserve (at least 64 MiB), or an
//   allocation fails, one stream_tracker barrier orders the legacy stream after
//   every stream and the blocks are freed on the legacy stream behind it.
// With a pool it was given (not owned), a synchronous allocation is followed by a
// synchronization of the legacy stream (slow, but correct) and a synchronous free
// by a barrier and a free on the legacy stream behind it.
//
// Thread safety: fully thread-safe; the driver serializes inside the pool.

#include <gpumem/device_memory_resource.hpp>

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

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
  /// Bytes freed with synchronous semantics that wait for a barrier.
  [[nodiscard]] std::size_t pending_bytes() const noexcept { return pending_bytes_.load(std::memory_order_relaxed); }
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
  /// cuMemPoolTrimTo(keep) on its pools.
  std::size_t do_trim(std::size_t keep) override;
  /// From the pool's RESERVED_MEM_CURRENT / USED_MEM_CURRENT attributes
  /// (largest_free_block unknown: 0).
  [[nodiscard]] resource_info do_info() const override;
  /// Equal when allocating from the same pool.
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  void* allocate_from(CUmemoryPool pool, std::size_t bytes, CUstream stream);
  /// The pool of synchronous allocations, created on first use (owned pools only).
  CUmemoryPool sync_pool();
  void free_on(void* p, CUstream stream) noexcept;
  /// One barrier, then every pending block freed on the legacy stream behind it.
  /// false (blocks stay pending) when no barrier can be made.
  bool reclaim() noexcept;

  CUmemoryPool pool_{};
  std::atomic<CUmemoryPool> sync_pool_{};  ///< owned pools only: synchronous allocations
  std::mutex sync_pool_mutex_;             ///< creates sync_pool_ once
  cuuint64_t release_threshold_{};
  bool owned_{false};
  int device_{-1};
  std::atomic<std::size_t> failed_frees_{0};
  std::mutex pending_mutex_;
  std::vector<std::pair<void*, std::size_t>> pending_;  ///< (block, bytes); guarded by pending_mutex_
  std::atomic<std::size_t> pending_bytes_{0};
};

}  // namespace gpumem
