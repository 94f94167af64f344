#pragma once
// device_memory_resource: the one interface every gpumem resource implements.
//
// Semantics follow RMM's device_memory_resource (../shared/seeds):
// - allocate(bytes, stream) returns memory usable by work on `stream` in stream
//   order, aligned to at least 256 bytes. Using it on another stream requires the
//   caller to synchronize that stream with `stream` first.
// - deallocate(p, bytes, stream) returns memory in stream order: it may be reused
//   by work on `stream` immediately, and by other streams only once they are
//   ordered after `stream` (the resource arranges that itself, e.g. with an event).
//   `bytes` must be the value given to allocate; `stream` need not be the stream
//   it was allocated on.
// - allocate(0, s) returns nullptr; deallocate(nullptr, ...) does nothing.
// - Failures throw gpumem::out_of_memory (CUDA_ERROR_OUT_OF_MEMORY) or
//   gpumem::cuda_error / gpumem::bad_alloc carrying the CUresult CUDA would give.
//   deallocate never throws.
// Each resource documents its own thread safety; all those shipped are thread-safe.

#include <gpumem/error.hpp>
#include <gpumem/memory_resource_concept.hpp>
#include <gpumem/stream.hpp>

#include <cstddef>
#include <cstdint>

namespace gpumem {

/// Alignment of every pointer a gpumem resource returns (CUDA gives 256 too).
inline constexpr std::size_t allocation_alignment = 256;

[[nodiscard]] constexpr std::size_t align_up(std::size_t v, std::size_t a) noexcept { return (v + a - 1) & ~(a - 1); }
[[nodiscard]] constexpr std::size_t align_down(std::size_t v, std::size_t a) noexcept { return v & ~(a - 1); }
[[nodiscard]] constexpr bool is_aligned(std::size_t v, std::size_t a) noexcept { return (v & (a - 1)) == 0; }

/// What a resource (and the chain below it) holds, for cudaMemGetInfo, reports and
/// out-of-memory diagnostics. Fields a resource does not know stay 0.
struct resource_info {
  std::size_t reserved_bytes{};      ///< obtained from the upstream/device and not yet returned
  std::size_t used_bytes{};          ///< handed out to callers and not yet deallocated
  std::size_t free_bytes{};          ///< reserved but not used (cached), reusable
  std::size_t largest_free_block{};  ///< biggest single request the cache can serve now
  /// Freed with synchronous semantics and not reusable until the next reclamation
  /// barrier (call_context::synchronous); counted in free_bytes too.
  std::size_t pending_bytes{};
  /// The most pending_bytes seen so far (at each reclamation, and now).
  std::size_t peak_pending_bytes{};
  /// Addresses held without device memory behind them (a pool's released pages):
  /// not in reserved_bytes, which counts device memory.
  std::size_t released_bytes{};
  /// Page release over the resource's life: bytes of pages unmapped from free blocks
  /// (given back to the device, or mapped again by the same miss elsewhere: see
  /// begin_page_moves()), bytes mapped again in released addresses, and the time spent
  /// doing so (the driver calls and the waits for the GPU before a release), in
  /// nanoseconds.
  std::size_t pages_released_total{};
  std::size_t pages_recommitted_total{};
  std::uint64_t page_work_ns{};
  /// (free - largest free) / free, in [0, 1]: TensorFlow BFC's fragmentation measure.
  [[nodiscard]] double fragmentation() const noexcept {
    return free_bytes == 0 ? 0.0
                           : static_cast<double>(free_bytes - largest_free_block) / static_cast<double>(free_bytes);
  }
};

class device_memory_resource {
 public:
  device_memory_resource() = default;
  device_memory_resource(device_memory_resource const&) = delete;
  device_memory_resource& operator=(device_memory_resource const&) = delete;
  device_memory_resource(device_memory_resource&&) = delete;
  device_memory_resource& operator=(device_memory_resource&&) = delete;
  virtual ~device_memory_resource() = default;

  /// Stream-ordered allocation; see the file comment for the contract.
  [[nodiscard]] void* allocate(std::size_t bytes, stream_ref stream = {}) { return do_allocate(bytes, stream); }
  /// Stream-ordered deallocation; never throws.
  void deallocate(void* p, std::size_t bytes, stream_ref stream = {}) noexcept { do_deallocate(p, bytes, stream); }

  /// Give cached memory back to the upstream / device. Returns the bytes released.
  /// Memory still in use stays. Adaptors forward to their upstream.
  std::size_t release() { return do_release(); }

  /// Gives cached memory back until at most `keep` bytes of free memory stay
  /// backed by device memory (cudaMemPoolTrimTo's meaning; trim(0) is release()).
  /// Returns the bytes given back. A resource that cannot keep part of its cache
  /// gives nothing back for keep > 0. Adaptors forward.
  std::size_t trim(std::size_t keep) { return keep == 0 ? do_release() : do_trim(keep); }

  /// What this resource and its upstreams hold; adaptors forward.
  [[nodiscard]] resource_info info() const { return do_info(); }

  /// Tell the resource that `stream` is about to be destroyed (the shim calls this
  /// from its cuStreamDestroy hook, before the real destroy). A resource that keeps
  /// per-stream state (pool free lists) orders or moves it so it never names the
  /// stream again. Adaptors forward. Never throws.
  void stream_destroyed(stream_ref stream) noexcept { do_stream_destroyed(stream); }

  /// Whether `p` lies in memory this resource (or a caching resource below it) holds
  /// from its upstream: a caching resource's slabs or chunks, in use or free. The shim
  /// refuses a free of such a pointer it has no record of (a second free) instead of
  /// handing it to CUDA, which could free a whole slab. Adaptors forward. Never throws.
  [[nodiscard]] bool owns(void const* p) const noexcept { return do_owns(p); }

  /// Contiguous growth (vmm_memory_resource): a resource that maps each allocation
  /// into one reserved range of virtual addresses, right after the previous one,
  /// returns the size its allocations are rounded to (a pool over it grows in
  /// multiples of it); every other resource 0. Adaptors forward. Never throws.
  [[nodiscard]] std::size_t contiguous_granularity() const noexcept { return do_contiguous_granularity(); }

  /// Whether the allocation at `next` continues, in one range of virtual addresses,
  /// an earlier allocation of this resource that ends at `earlier_end`: then both
  /// may be used as one buffer (one copy, one kernel argument, across the seam).
  /// False for separate cuMemAlloc allocations, even when their addresses happen to
  /// touch. Adaptors forward. Never throws.
  [[nodiscard]] bool extends(void const* earlier_end, void const* next) const noexcept {
    return do_extends(earlier_end, next);
  }

  /// Page release (vmm_memory_resource): gives the device memory behind
  /// [p, p + bytes) back to the device while the addresses stay allocated; an
  /// access to them faults until commit(). The range lies inside one allocation of
  /// this resource, its ends on multiples of contiguous_granularity() (the page
  /// size), and no queued GPU work may still use it (the caller has waited for
  /// that). False, changing nothing, where the resource cannot (every resource but
  /// vmm_memory_resource, and a device without virtual memory management).
  /// Adaptors forward. Never throws.
  bool decommit(void* p, std::size_t bytes) noexcept { return do_decommit(p, bytes); }
  /// Backs a decommitted range with device memory again, usable at once by any
  /// stream. Throws out_of_memory (changing nothing) when the device has none.
  /// Adaptors forward.
  void commit(void* p, std::size_t bytes) { do_commit(p, bytes); }
  /// Page release: between begin_page_moves() and end_page_moves() (which nest), the
  /// device memory decommit() unmaps stays with the resource, and commit() and
  /// allocations map it again before they ask the device for more: a page moved so
  /// costs a third less (57 against 87 µs on an H200: no memory freed, none created).
  /// What is left goes back to the device at the last end_page_moves(). It is not in
  /// info() meanwhile. Adaptors forward. Never throw.
  void begin_page_moves() noexcept { do_begin_page_moves(); }
  void end_page_moves() noexcept { do_end_page_moves(); }

  /// Whether deallocate() may call the CUDA driver, and so needs the context of the
  /// resource's device current (the shim makes it current for a free only then: a
  /// pool's free only files the block, so its hot path skips the context lookup).
  /// True unless the resource knows better: pool_memory_resource and
  /// fixed_size_memory_resource false, binning_memory_resource whether any of its
  /// bins or its upstream does; adaptors forward (logging_resource_adaptor: true,
  /// it may look up the device). Never throws.
  [[nodiscard]] bool deallocate_calls_driver() const noexcept { return do_deallocate_calls_driver(); }

  [[nodiscard]] bool is_equal(device_memory_resource const& other) const noexcept {
    return this == &other || do_is_equal(other);
  }
  bool operator==(device_memory_resource const& other) const noexcept { return is_equal(other); }

  // libcu++ cuda::mr::async_resource spelling (CCCL 3.0). Every pointer is
  // 256-byte aligned, so any power-of-two alignment up to 256 is honoured.
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref s) {
    check_alignment(alignment);
    return allocate(bytes, s);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t /*alignment*/, stream_ref s) noexcept {
    deallocate(p, bytes, s);
  }
  /// Synchronous spelling for cuda::mr::resource: allocates on the legacy stream.
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment) {
    check_alignment(alignment);
    return allocate(bytes, stream_ref{});
  }
  void deallocate(void* p, std::size_t bytes, std::size_t /*alignment*/) noexcept {
    deallocate(p, bytes, stream_ref{});
  }
#if GPUMEM_CCCL_STREAM_FIRST
  // CCCL >= 3.1 spelling of the same calls.
  [[nodiscard]] void* allocate(stream_ref s, std::size_t bytes, std::size_t alignment) {
    return allocate_async(bytes, alignment, s);
  }
  void deallocate(stream_ref s, void* p, std::size_t bytes, std::size_t alignment) noexcept {
    deallocate_async(p, bytes, alignment, s);
  }
#endif
  friend void get_property(device_memory_resource const&, device_accessible) noexcept {}

 protected:
  static void check_alignment(std::size_t alignment) {
    if (alignment == 0 || alignment > allocation_alignment || (allocation_alignment % alignment) != 0) {
      throw logic_error{"gpumem: alignment must be a power of two no larger than 256"};
    }
  }

 private:
  virtual void* do_allocate(std::size_t bytes, stream_ref stream) = 0;
  virtual void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept = 0;
  virtual std::size_t do_release() { return 0; }
  virtual std::size_t do_trim(std::size_t /*keep*/) { return 0; }
  [[nodiscard]] virtual resource_info do_info() const { return {}; }
  virtual void do_stream_destroyed(stream_ref) noexcept {}
  [[nodiscard]] virtual bool do_owns(void const*) const noexcept { return false; }
  [[nodiscard]] virtual std::size_t do_contiguous_granularity() const noexcept { return 0; }
  [[nodiscard]] virtual bool do_extends(void const*, void const*) const noexcept { return false; }
  virtual bool do_decommit(void*, std::size_t) noexcept { return false; }
  virtual void do_begin_page_moves() noexcept {}
  virtual void do_end_page_moves() noexcept {}
  virtual void do_commit(void*, std::size_t) {
    throw logic_error{"gpumem: commit() on a resource without page release"};
  }
  [[nodiscard]] virtual bool do_deallocate_calls_driver() const noexcept { return true; }
  [[nodiscard]] virtual bool do_is_equal(device_memory_resource const&) const noexcept { return false; }
};

}  // namespace gpumem
