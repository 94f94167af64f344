#pragma once
// pool_memory_resource: a coalescing best-fit sub-allocator over slabs obtained
// from an upstream resource, with one free list per stream (RMM's pool, reworked)
// and CUDA's synchronous semantics for the calls that ask for them.
//
// Stream-ordered calls (RMM's contract, device_memory_resource.hpp):
// - A block freed on stream A goes to A's free list and is reused by A at once:
//   no event, no host wait.
// - Stream B takes memory freed on A only after B is ordered after A: at the
//   moment B takes it the pool records A's (one, reusable) event and makes B wait
//   on it (cuStreamWaitEvent). No event is recorded per free, and the host never
//   blocks. B then owns A's whole free list (the wait covers all of it), unless
//   A took from B last and A's list is one block: then A keeps its front (small
//   requests; coalescing_free_list::share_into), so a thread taking turns between
//   two streams settles after one take each way.
// - stream_destroyed(s) records one event on s and moves s's free blocks to a
//   "foreign" batch guarded by that event.
// - A capturing stream is never recorded on or made to wait: the pool grows instead.
// - The per-thread default stream (0x2) is a different stream on every thread, so
//   its free list is per thread; other threads order after it through the legacy
//   stream.
//
// Synchronous calls (call_context::synchronous, set by the shim in safe mode for
// cudaMalloc/cuMemAlloc and cudaFree/cuMemFree, and for any free of synchronously
// allocated memory):
// - An allocation is served only from CLEAN memory: memory no queued GPU work
//   can touch (fresh slabs, and memory reclaimed by a barrier). So the program may
//   use it at once on any stream, as cudaMalloc's memory. Clean memory is kept in
//   shards, one per thread (up to 16; stream_free_lists.hpp): a thread takes from
//   its own shard, where its own frees come back after a barrier, and from the
//   others only when its own has no block that fits. So threads allocating
//   synchronously share no lock. Before the pool grows for want of a block that
//   the shards hold only between them, it joins them, where neighbours coalesce.
// - Once the pending memory reaches the reclamation threshold (below), a synchronous
//   request that finds no exact fit in its clean shard reclaims before it splits a
//   clean block: the waiting memory often holds the better fit, and splitting
//   meanwhile fragments the pool.
// - A free files the block as PENDING: work on any stream may still use it (real
//   cudaFree synchronizes the device first). Pending blocks become clean only by
//   reclamation: one device-wide GPU-side barrier (stream_tracker::barrier(): the
//   legacy stream waits for every stream, every stream waits for it; the host
//   never waits), after which every block freed before it — pending, and every
//   stream's list — becomes clean: a thread's pending frees go to its own clean
//   shard, the streams' lists to the shard of the thread that made the barrier.
// - Frees that no allocation follows do not wait for a miss: once twice the miss
//   path's reclamation threshold (below) waits, the freeing thread makes the barrier
//   itself, if no other thread holds the growth mutex. So memory waiting for a
//   barrier stays within about 1/16 of the pool (at most 1 GiB) where barriers are
//   dear, less where they are cheap.
// - Fresh slabs are grown with synchronous semantics on the legacy stream: usable
//   at once by any stream. What is left of a slab after the request goes to the
//   thread's clean shard for a synchronous request, and to the stream's own list for a
//   stream-ordered one (so that stream's frees coalesce with it).
//
// When memory runs short (see grow_and_take in the .cpp): a miss first reclaims if
// the memory waiting for reclamation is at least the request and 1/32 of the pool
// within 8..512 MiB (so a tight loop makes a barrier only every few dozen frees, and
// pending memory never drives growth; the share and the floor shrink with the
// device's non-blocking streams, down to 1/1056 and 1 MiB with none, where a
// barrier is one driver call: stream_ordered_memory_resource::reclaim_threshold),
// or at least the request in 4096 or more pending blocks (so small frees are reused
// within a few thousand), or, with page release, a page's worth (what follows maps
// pages, each dearer than a barrier); else it grows
// by max(request, min_growth, min(1/64 of the pool, 32 MiB)) within maximum_size:
// sized to the request, so the pool stays within a few percent of what is live.
// Over an upstream that grows contiguously (vmm_memory_resource: each allocation
// mapped right after the last), a growth joins the slab it continues (one region of
// several upstream pieces), free blocks coalesce across the seam, the request counts
// the free block at the end of the last growth (it grows by what that block lacks)
// when that maps fewer granules (else the request starts the new memory, on a
// granule boundary, and the block stays for smaller requests), and steps are
// rounded to the upstream's granularity; release() then also gives
// back the free pieces at the end of a region. If
// the upstream refuses, it reclaims whatever is waiting, takes every other
// stream's free memory, returns fully free slabs upstream and retries the request
// alone; only then it throws out_of_memory saying what it holds. That last look is
// repeated while other threads were moving free memory between lists (it is in no
// list for a moment), and a reclamation made for a request serves that request
// before any other thread sees the reclaimed memory.
//
// Page release (over an upstream that can decommit: vmm_memory_resource, which maps
// every 2 MiB page with a physical allocation of its own; pool_options::release_pages):
// addresses and device memory are held apart. The pool's free blocks hold device
// memory; a released range holds addresses only, in no free list, so the hot paths
// never meet one and pay nothing for it.
// - When no free block fits a request (after the reclaims and joins above), memory
//   waiting for a barrier is reclaimed first (a barrier makes it clean, and it may
//   serve the request), then the device memory of whole pages inside free clean
//   blocks goes back to the device, as much as the request needs, smallest blocks
//   first and from each block's end. Only then is new memory mapped: in a released
//   range of the pool that holds the request's pages (the smallest; it joins the
//   free memory around it), else in a growth. So the pool maps new memory only when
//   free memory is short, never because it is scattered in pieces too small for the
//   request: the device memory moves to where it is needed (GMLake's stitching, by
//   page), and the footprint follows live memory within a page per free block.
// - Only clean memory is released, and only once the last barrier's work has run on
//   the GPU (cuMemUnmap must not pull memory from under queued work). A stream's
//   list and pending frees are first made clean by a barrier. A miss does not wait
//   for the GPU to get there: while it is behind, the miss maps new memory and the
//   free pages stay for a later miss that finds the GPU done, a synchronization's
//   release or a trim, as long as what misses so hold stays within 1/32 of the
//   pool; past that a miss waits (the host blocks) and gives pages back. A loop
//   whose free memory lies scattered at every step then settles with that much
//   more mapped, instead of moving pages and draining the GPU's queue each step.
// - trim(keep) reclaims, waits for the barrier, and releases free pages until at most
//   `keep` free bytes stay backed (keep == 0: whole free slabs go back upstream too);
//   release() is trim(0). The shim calls it for cudaMemPoolTrimTo, gpumem.trim()
//   and, at synchronization points, with the release threshold.
// - maximum_size bounds the device memory the pool holds (pool_size()), not its
//   addresses (address_bytes()): before it refuses a request it releases every free
//   page and maps the request in released addresses.
// Cost: one page map and unmap per page moved (vmm_memory_resource.hpp; a miss maps
// the memory of the pages it gives back again, inside device_memory_resource's
// begin_page_moves(), so that a move frees and creates no memory); a program
// whose shapes repeat stops missing once warm (at most 1/32 of the pool more mapped
// than stitching alone would hold), and stops paying it.
//
// A barrier is refused while any stream capture is active (it would break the
// capture): pending memory then stays pending and the pool grows instead.
//
// Thread safety: every member is thread-safe. Threads working on different
// streams contend on no common lock in allocate/deallocate (one mutex per stream's
// free list, one per clean shard, one per pending shard; a synchronous allocation
// reads the pending totals from one cache line that the shards update once per 16
// frees or 64 KiB; the stream table and the
// slab table are read under shared locks). The thread that owns a stream's list
// (the first to free on the stream, until it exits) frees without taking its lock:
// the block waits in the list's one-block slot for the next holder of the lock,
// which files it (or, allocating the same size, takes it back), so a thread's
// allocate+free pair on its stream takes one lock (stream_free_lists.hpp).
// Growth and reclamation take a separate growth mutex. release() and info() lock
// everything.
//
// Complexity: allocate/deallocate O(log n) in the number of free blocks of the list
// used (best fit from a size-ordered set, coalescing through an address map); a
// synchronous free is O(1).
//
// deallocate(p, bytes, s) needs the `bytes` given to allocate (rounded up to 256
// as allocate did); a block that overlaps a free one (double free) is ignored
// rather than corrupting the pool. An unknown pointer, or a size that runs past
// the pointer's region, is a caller's bug: debug builds abort (GPUMEM_ASSERT),
// release builds ignore it.

#include <gpumem/device_memory_resource.hpp>

#include <cstddef>
#include <memory>
#include <optional>

namespace gpumem {

inline constexpr std::size_t pool_default_min_growth = std::size_t{2} << 20;  // 2 MiB

struct pool_options {
  /// Bytes reserved at construction (rounded up to 256). nullopt: half of the
  /// current device's free memory (cuMemGetInfo), capped by maximum_size. 0: none.
  std::optional<std::size_t> initial_size{};
  /// Most bytes the pool ever holds from the upstream. nullopt: no cap (the upstream decides).
  std::optional<std::size_t> maximum_size{};
  /// Smallest upstream request when the pool grows.
  std::size_t min_growth = pool_default_min_growth;
  /// Device whose streams a reclamation barrier orders (stream_tracker::of). -1:
  /// the device of the context current when the pool first grows.
  int device = -1;
  /// Give the device memory of free pages back (over an upstream that can:
  /// vmm_memory_resource), so that the pool holds about what is live; see above.
  bool release_pages = true;
};

class pool_memory_resource final : public device_memory_resource {
 public:
  /// Throws logic_error for a null upstream or initial_size > maximum_size,
  /// out_of_memory if the initial reservation fails, cuda_error if the initial
  /// size must be read from a driver that fails.
  explicit pool_memory_resource(device_memory_resource* upstream, pool_options opts = {});
  /// Returns every slab to the upstream, whether or not blocks are still in use
  /// (as RMM does), and destroys the pool's events.
  ~pool_memory_resource() override;

  [[nodiscard]] device_memory_resource* upstream() const noexcept;
  /// Bytes of device memory the pool holds: its slabs less their released pages.
  [[nodiscard]] std::size_t pool_size() const noexcept;
  /// Bytes of addresses the pool holds from the upstream (its slabs, released pages included).
  [[nodiscard]] std::size_t address_bytes() const noexcept;
  /// Reclaims what waits for a barrier and gives device memory back until at most
  /// `keep` free bytes stay backed (0: whole free slabs go back upstream too). The
  /// host waits for the GPU to reach the barrier. Returns the bytes given back.
  std::size_t trim(std::size_t keep);
  /// Bytes freed with synchronous semantics that wait for a reclamation barrier.
  [[nodiscard]] std::size_t pending_bytes() const noexcept;
  /// Reclamations made so far (each one barrier).
  [[nodiscard]] std::size_t reclaim_count() const noexcept;
  [[nodiscard]] pool_options const& options() const noexcept;

 private:
  struct impl;
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  /// Returns every completely free slab to the upstream; the bytes returned.
  std::size_t do_release() override;
  /// trim(keep) above.
  std::size_t do_trim(std::size_t keep) override;
  [[nodiscard]] resource_info do_info() const override;
  void do_stream_destroyed(stream_ref stream) noexcept override;
  /// p inside one of the pool's slabs (or a caching upstream's memory).
  [[nodiscard]] bool do_owns(void const* p) const noexcept override;
  /// A free only files the block in a list: no driver call.
  [[nodiscard]] bool do_deallocate_calls_driver() const noexcept override { return false; }

  std::unique_ptr<impl> impl_;
};

}  // namespace gpumem
