#pragma once
// deferred_free_resource_adaptor: keeps cudaFree/cuMemFree semantics ("safe" mode).
//
// Real cudaFree/cuMemFree synchronize the device, so a program may free a block
// while a kernel it launched still reads it: by the time the free returns, the
// kernel is done. A stream-ordered pool would hand that block out again at once.
// This adaptor holds blocks freed with call_context::synchronous_free == true in a
// pending list instead; they become reusable after ONE cuCtxSynchronize, done
//  - when the pending bytes pass `flush_threshold`, or
//  - when the upstream cannot satisfy an allocation (out of memory / past its
//    maximum): then flush and retry once,
//  - on release().
// A flush never synchronizes while any stream capture is active in the process
// (a sync would invalidate it): the shim reports captures through
// capture_begun()/capture_ended(); while one is active the blocks stay pending
// and the upstream grows instead.
// Frees without synchronous_free (cudaFreeAsync, library calls) go straight to the
// upstream in stream order.
//
// Thread safety: thread-safe. Pending blocks live in lock-sharded lists (a shard
// per thread hash), so concurrent frees rarely contend; a flush takes every shard.
// Stream semantics: allocate/deallocate forward the caller's stream; a pending
// block is returned to the upstream on the stream it was freed on (or the legacy
// stream if that stream was destroyed meanwhile) after the device is idle.

#include <gpumem/device_memory_resource.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

namespace gpumem {

class deferred_free_resource_adaptor final : public device_memory_resource {
 public:
  /// `upstream` must outlive the adaptor. `device`: ordinal whose primary context
  /// is synchronized by a flush (-1: the calling thread's current context).
  deferred_free_resource_adaptor(device_memory_resource* upstream, std::size_t flush_threshold,
                                 int device = -1);
  ~deferred_free_resource_adaptor() override;

  [[nodiscard]] device_memory_resource* get_upstream() const noexcept { return upstream_; }
  [[nodiscard]] std::size_t flush_threshold() const noexcept { return threshold_; }
  /// Bytes freed synchronously and not yet reusable.
  [[nodiscard]] std::size_t pending_bytes() const noexcept { return pending_bytes_.load(std::memory_order_relaxed); }
  /// How many flushes (device synchronizations) have happened.
  [[nodiscard]] std::size_t flush_count() const noexcept { return flushes_.load(std::memory_order_relaxed); }

  /// Synchronize the device and hand every pending block to the upstream.
  /// Returns false (blocks stay pending) when a stream capture is active or the
  /// synchronization failed. Never throws.
  bool flush() noexcept;

  /// Process-wide count of active stream captures, maintained by the shim's
  /// cuStreamBeginCapture*/cuStreamEndCapture hooks.
  static void capture_begun() noexcept { active_captures_.fetch_add(1, std::memory_order_acq_rel); }
  static void capture_ended() noexcept;
  [[nodiscard]] static bool capture_active() noexcept { return active_captures_.load(std::memory_order_acquire) > 0; }
  [[nodiscard]] static long capture_count() noexcept { return active_captures_.load(std::memory_order_acquire); }
  /// Forget every capture (a forked child starts with none).
  static void reset_captures() noexcept { active_captures_.store(0, std::memory_order_release); }

 private:
  struct pending_block {
    void* ptr;
    std::size_t bytes;
    stream_ref stream;
  };
  struct alignas(64) shard {
    std::mutex mtx;
    std::vector<pending_block> blocks;
  };
  static constexpr std::size_t shard_count = 16;

  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  std::size_t do_release() override;
  [[nodiscard]] resource_info do_info() const override;
  void do_stream_destroyed(stream_ref stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  [[nodiscard]] shard& my_shard() noexcept;
  bool synchronize_device() noexcept;

  device_memory_resource* upstream_;
  std::size_t threshold_;
  int device_;
  std::array<shard, shard_count> shards_{};
  std::atomic<std::size_t> pending_bytes_{0};
  std::atomic<std::size_t> flushes_{0};
  std::mutex flush_mtx_;  // one flush at a time; frees keep going meanwhile

  static inline std::atomic<long> active_captures_{0};
};

}  // namespace gpumem
