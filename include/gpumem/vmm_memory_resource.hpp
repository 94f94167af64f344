#pragma once
// vmm_memory_resource: device memory through CUDA's virtual memory management
// (cuMemCreate + cuMemMap into a range reserved with cuMemAddressReserve), placed
// so that consecutive allocations on a device follow each other in one range of
// virtual addresses. A pool over it (pool_memory_resource) joins each growth to
// the memory it already holds: a free block at the end of the pool and the new
// memory coalesce, so a request larger than any earlier growth needs only the
// difference, and the pool holds about what is live even when shapes change from
// step to step (as PyTorch's expandable segments do for its own allocator).
//
// Placement: each device has its reservations (twice the device's memory each,
// address space only). An allocation goes right after the previous one when that
// space is free, else into the lowest free space that fits, else into a new
// reservation. Sizes are rounded up to the device's allocation granularity (2 MiB
// on current GPUs): contiguous_granularity() says how much.
//
// Pages: each granule of an allocation is mapped with a physical allocation of its
// own (cuMemCreate of one granule), so decommit() can unmap any whole granules
// inside an allocation, giving their memory back to the device while the addresses
// stay reserved, and commit() maps fresh memory there again. A pool over this
// resource uses that to hold physical memory only where it is live or cached
// (pool_memory_resource.hpp). Costs: an allocation of n granules makes n cuMemCreate
// and n cuMemMap calls and one cuMemSetAccess; a decommit one cuMemUnmap per run of
// mapped granules. info() counts mapped bytes: what the device has given.
//
// Why one granule each: cuMemUnmap cannot split a physical allocation, so a larger
// one goes back only when all of it is free. On an H200 (2026-11-29) physical
// allocations of up to 4 granules cut a varying-shape decoder's page time from 706
// to 243 ms a run, but a block still live in one kept its free granules mapped and
// the peak rose from 14999 to 16173 MiB, past PyTorch's expandable segments.
//
// Page moves: between begin_page_moves() and the last end_page_moves(), decommit()
// keeps the physical allocation of each granule it unmaps (a reference taken with
// cuMemRetainAllocationHandle), and the maps that follow take those before creating
// any; the rest is released at the end. A pool opens that scope for each miss, whose
// release is followed by a stitch or a growth: a page moved so costs 57 µs against
// 87 on an H200, with no memory freed or created. Kept memory is not in info().
//
// Sharing: pages are created exportable as POSIX file descriptors
// (requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) where the
// device says it supports them, so that CUDA IPC can share them with another
// process (cuMemRetainAllocationHandle on an address, then
// cuMemExportToShareableHandle). A driver that refuses the request
// (CUDA_ERROR_NOT_SUPPORTED or CUDA_ERROR_INVALID_VALUE) gets plain pages from
// then on, as PyTorch's expandable segments do.
//
// Access: the owning device, and every device that can access it as a peer
// (cuDeviceCanAccessPeer), may read and write it: memory from cuMemAlloc becomes
// reachable from a peer once the program enables peer access, and a program that
// does so must find this memory reachable too. Where the device supports it the
// memory is also registrable for GPUDirect RDMA.
//
// Streams: allocate is synchronous (the memory is usable on any stream at once).
// deallocate(p, n, s) waits for stream `s` (cuStreamSynchronize) before it unmaps:
// unmapping memory that queued work still uses is undefined, and the callers (the
// pool) name a stream ordered after every user of the memory. A legacy-stream free
// thus waits like cuMemFree does.
//
// Fallback: on a device without virtual memory management (or a driver that lacks
// the entry points) allocations are plain cuMemAlloc_v2 and never join.
//
// Thread safety: every member is thread-safe (one mutex; allocation and free are
// rare, the growth and release of a pool).

#include <gpumem/device_memory_resource.hpp>

#include <cstddef>
#include <memory>

namespace gpumem {

class vmm_memory_resource final : public device_memory_resource {
 public:
  vmm_memory_resource();
  /// Unmaps and releases whatever is still allocated, and frees the reservations.
  ~vmm_memory_resource() override;

  /// Allocations made with cuMemAlloc_v2 because the device lacks virtual memory
  /// management (0 on every GPU since Pascal with a driver of CUDA 10.2 or later).
  [[nodiscard]] std::size_t fallback_allocations() const noexcept;

  /// The device's context is about to be reset (cudaDeviceReset, a primary context
  /// reset): waits for the device (cuCtxSynchronize, in the caller's context, which
  /// must be that device's), then unmaps every allocation on it and frees its
  /// reservations. Mapped memory outlives contexts, and the program's pointers into
  /// it die with the reset, as cuMemAlloc's memory does; the fallback's cuMemAlloc
  /// memory goes with the context itself. Later frees of those pointers are refused.
  void reset_device(int device) noexcept;

 private:
  struct impl;
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  /// reserved == used == the bytes mapped (or allocated by the fallback).
  [[nodiscard]] resource_info do_info() const override;
  [[nodiscard]] std::size_t do_contiguous_granularity() const noexcept override;
  [[nodiscard]] bool do_extends(void const* earlier_end, void const* next) const noexcept override;
  bool do_decommit(void* p, std::size_t bytes) noexcept override;
  void do_commit(void* p, std::size_t bytes) override;
  void do_begin_page_moves() noexcept override;
  void do_end_page_moves() noexcept override;

  std::unique_ptr<impl> impl_;
};

}  // namespace gpumem
