#pragma once
// pinned_pool_memory_resource: a cache of page-locked host blocks over an upstream
// (pinned_host_memory_resource, one flag set), so that a program allocating pinned
// staging buffers in a loop pays cuMemHostAlloc's page pinning once per block. The
// same cache serves managed memory (over managed_memory_resource, one attach
// flag): it is host-accessible too, and each block stays one whole allocation.
//
// Why not pool_memory_resource: its reuse rule is a GPU-side barrier (later GPU
// work waits for earlier GPU work), which is enough for device memory, which only
// the GPU touches. Pinned (and managed) memory is written and read by the CPU as
// soon as the program holds it, so a reused block must wait until the GPU has actually
// finished every copy that may still touch it, which only the host can check.
// Sub-allocating slabs would also make CUDA's pointer queries answer for the slab
// (its range, its buffer id) instead of the program's allocation.
//
// Blocks: every block is one whole upstream allocation, never split or joined.
// A request is rounded up to its size class: whole 4 KiB pages, then four classes
// per power of two (x1, x1.25, x1.5, x1.75), so at most a quarter is wasted; a
// free block serves only requests of its own class. cuMemHostGetFlags,
// cuMemHostGetDevicePointer and cuPointerGetAttributes therefore answer for a
// pooled block, interior pointers included, as for an allocation of its own with
// the pool's flags (their range is the block's class size, not the request).
//
// Reuse (option wait_for_gpu, the shim's safe mode): a freed block is PENDING: a
// copy issued before the free, on any stream of any device, may still read or
// write it (real cuMemFreeHost and cuMemFree wait for the context's work). It is handed out
// again only once the GPU has completed all such work:
// - the pool FENCES pending blocks: on every device whose primary context is
//   active, a stream_tracker barrier (the legacy stream waits for every stream; the
//   host never waits). A free fences at once when no earlier fence is still in
//   flight (so at most one is: one barrier per GPU round trip, however many
//   frees); a request that finds no clean block of its class fences whatever is
//   pending. Each batch then waits for its barriers to complete.
// - a fenced batch becomes clean when stream_tracker::last_barrier_complete() says
//   so for each of its devices (cuEventQuery; a later barrier completing implies
//   the earlier one did). Until then the pool grows from the upstream instead.
// - the host waits for the fenced batches (cuEventSynchronize) only where growing
//   is refused (maximum_size reached, after giving back the clean blocks of other
//   classes; or the upstream out of memory), or where more than 64 MiB beyond what
//   the program uses already waits for the GPU: a host loop never outruns a busy
//   GPU by more (CUDA's own free would have blocked).
// - a barrier is refused while a stream capture is active: the blocks then stay
//   pending and the pool grows.
// Without wait_for_gpu a freed block is clean at once (the program promises that
// no copy still uses it, as RMM's pinned pool assumes).
//
// release() fences, waits for the GPU and gives every cached block back; it blocks
// the host, so it is for explicit trims, never for exit. The destructor frees every
// block upstream, in use or not.
//
// A second free is ignored. An unknown pointer, or a size of another class than
// the allocation's, aborts in debug builds (GPUMEM_ASSERT); release builds ignore an
// unknown pointer and free by the pointer alone.
//
// Thread safety: every member is thread-safe. One mutex guards the block table and
// the lists (pinned allocation is rare next to device allocation); the upstream
// and the driver are called without it.
//
// Complexity: allocate/deallocate O(log n) in the blocks held; a fence costs one
// barrier per active device (stream_tracker.hpp) and serves every block pending then;
// a free also queries the fence in flight (one cuEventQuery per device).

#include <gpumem/device_memory_resource.hpp>

#include <cstddef>
#include <memory>
#include <optional>

namespace gpumem {

struct pinned_pool_options {
  /// Most bytes (of class sizes) the pool holds from the upstream; nullopt: no cap.
  std::optional<std::size_t> maximum_size{};
  /// Reuse a freed block only once the GPU completed the work issued before the free.
  bool wait_for_gpu = true;
};

class pinned_pool_memory_resource final : public device_memory_resource {
 public:
  /// Throws logic_error for a null upstream. Makes no CUDA call.
  explicit pinned_pool_memory_resource(device_memory_resource* upstream, pinned_pool_options opts = {});
  ~pinned_pool_memory_resource() override;

  [[nodiscard]] device_memory_resource* upstream() const noexcept;
  [[nodiscard]] pinned_pool_options const& options() const noexcept;
  /// The size class a request of `bytes` (> 0) is served from.
  [[nodiscard]] static std::size_t class_size(std::size_t bytes) noexcept;
  /// Fences made so far (each one barrier per active device).
  [[nodiscard]] std::size_t fence_count() const noexcept;
  /// Times the host waited for the GPU to free a block (growth refused, or much waiting).
  [[nodiscard]] std::size_t wait_count() const noexcept;

 private:
  struct impl;
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  std::size_t do_release() override;
  [[nodiscard]] resource_info do_info() const override;
  /// p inside a block the pool holds (in use, pending or clean).
  [[nodiscard]] bool do_owns(void const* p) const noexcept override;
  /// wait_for_gpu: a free may fence (driver calls); else it only files the block.
  [[nodiscard]] bool do_deallocate_calls_driver() const noexcept override;

  std::unique_ptr<impl> impl_;
};

}  // namespace gpumem
