#pragma once
// One simulated device's memory: a memfd-backed host mapping (so another process
// can map it for IPC) sub-allocated by a best-fit allocator over an
// address-ordered free map with coalescing. A size the host cannot map leaves the
// device with no memory (total 0, every allocation CUDA_ERROR_OUT_OF_MEMORY).
//
// Thread safety: every member function locks the heap's own mutex; one heap per
// device, so devices never contend with each other.

#include "sim_api.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

namespace gpumemsim {

struct context;
struct mem_pool;

/// What the heap knows of one live allocation.
struct allocation {
  std::uintptr_t base = 0;
  std::size_t size = 0;       ///< rounded to the heap's alignment: what free/total count
  std::size_t requested = 0;  ///< what the caller asked for
  bool managed = false;
  bool free_pending = false;  ///< a cuMemFreeAsync is queued (or captured) for it
  mem_pool* pool = nullptr;   ///< stream-ordered allocations only
  context* ctx = nullptr;
  std::uint64_t buffer_id = 0;
};

/// Why a pointer could not be freed.
enum class free_status { ok, unknown, interior, already_freed, free_pending };

class device_heap {
 public:
  static constexpr std::size_t alignment = 256;

  device_heap(int ordinal, std::size_t bytes);
  ~device_heap();
  device_heap(device_heap const&) = delete;
  device_heap& operator=(device_heap const&) = delete;

  /// CUDA_ERROR_OUT_OF_MEMORY when no free block fits; CUDA_ERROR_NOT_INITIALIZED
  /// in a fork()ed child (the mapping is shared with the parent). `align` (a
  /// power of two, at least `alignment`) places the block at that offset
  /// alignment within the heap's mapping: page-aligned blocks can be mapped
  /// elsewhere (cuMemMap).
  CUresult allocate(std::size_t bytes, allocation const& info, std::uintptr_t* out, std::size_t align = alignment);
  /// Checks `ptr` is the base of a live allocation (not pending) and returns it.
  free_status check_free(std::uintptr_t ptr, allocation* out = nullptr);
  /// Marks a live allocation as having a queued async free (double-free detection).
  free_status mark_free_pending(std::uintptr_t ptr);
  /// Undoes mark_free_pending (the async free could not be queued).
  void clear_free_pending(std::uintptr_t ptr);
  /// Returns the allocation's block to the free map.
  free_status release(std::uintptr_t ptr, bool allow_pending);
  /// Forgets the live allocation at `ptr` without ever reusing its block: it
  /// stays counted in used() (another process may still map it).
  void retire(std::uintptr_t ptr);
  /// The live allocation containing `ptr` (interior pointers included).
  bool find(std::uintptr_t ptr, allocation* out);
  bool contains(std::uintptr_t ptr) const noexcept { return ptr >= base_ && ptr < base_ + capacity_; }
  /// Frees every allocation of `ctx` (primary context reset, cuCtxDestroy); returns
  /// how many, and what they were in `released` if given.
  std::size_t release_all(context const* ctx, std::vector<allocation>* released = nullptr);

  std::size_t total() const noexcept { return capacity_; }
  std::size_t used();
  std::size_t live_count();
  /// Rebuilds the mapping at a new size; false while anything is live or retired.
  bool resize(std::size_t bytes);

  int fd() const noexcept { return fd_; }
  std::uintptr_t base() const noexcept { return base_; }
  int ordinal() const noexcept { return ordinal_; }

 private:
  void map(std::size_t bytes);
  void unmap() noexcept;
  void insert_free(std::uintptr_t addr, std::size_t size);  // coalesces
  void erase_free(std::map<std::uintptr_t, std::size_t>::iterator it);
  void discard_pages(std::uintptr_t addr, std::size_t size) noexcept;
  std::map<std::uintptr_t, allocation>::iterator live_containing(std::uintptr_t ptr);

  int ordinal_;
  int owner_pid_ = 0;  // a fork()ed child must not carve up its parent's shared heap
  int fd_ = -1;
  std::uintptr_t base_ = 0;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
  std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> free_by_addr_;
  std::set<std::pair<std::size_t, std::uintptr_t>> free_by_size_;
  std::map<std::uintptr_t, allocation> live_;
  std::set<std::uintptr_t> freed_bases_;  // freed and not reused: tells double free from unknown
};

}  // namespace gpumemsim
