#pragma once
// allocation_registry: every pointer the shim handed out, with what is needed to
// free it correctly whatever entry point and device the free comes through.
//
// Sharded by pointer hash, one mutex per shard; each shard an ordered map so an
// interior pointer (cuMemGetAddressRange, pointer attributes) finds its allocation.
// Exact lookups (every free) are O(log n) within one shard.
//
// Freed chain pointers stay as tombstones until the address is handed out again,
// so a double free is recognised (and refused) instead of reaching cuMemFree, which
// could free the pool's whole slab when the block sits at its start.
//
// Thread safety: all members are thread-safe.

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

namespace gpumem::shim {

struct device_chain;

enum class alloc_kind : std::uint8_t {
  sync,         ///< cudaMalloc / cuMemAlloc, from a chain
  async,        ///< cudaMallocAsync / cuMemAllocAsync / FromPoolAsync, from a chain
  pitch,        ///< cudaMallocPitch / cuMemAllocPitch, from a chain
  managed,      ///< cudaMallocManaged / cuMemAllocManaged: passed to CUDA
  captured,     ///< stream-ordered allocation on a capturing stream: passed to CUDA (graph memory)
  foreign_pool, ///< cuMemAllocFromPoolAsync on a pool the program made: passed to CUDA
  passthrough   ///< any other allocation CUDA made (no context yet, device passes through)
};

[[nodiscard]] constexpr bool from_chain(alloc_kind k) noexcept {
  return k == alloc_kind::sync || k == alloc_kind::async || k == alloc_kind::pitch;
}
[[nodiscard]] const char* to_string(alloc_kind k) noexcept;

struct allocation {
  std::size_t bytes = 0;          ///< requested (pitch: pitch * height)
  CUstream stream = nullptr;      ///< allocating stream (handles as the resources see them)
  device_chain* chain = nullptr;  ///< owning chain; nullptr for pass-through kinds
  int device = -1;
  alloc_kind kind = alloc_kind::sync;
  const char* entry = nullptr;    ///< entry point that allocated (leak reports)
};

enum class take_result { taken, already_freed, unknown };

class allocation_registry {
 public:
  /// Records a live allocation at `p` (replacing a tombstone or stale entry).
  void insert(std::uintptr_t p, allocation const& a);
  /// Records `a` unless `p` is already live (a pass-through seen at both levels).
  /// Returns whether it was recorded now.
  bool insert_if_absent(std::uintptr_t p, allocation const& a);
  /// Removes the live entry at exactly `p`, leaving a tombstone for chain kinds.
  take_result take(std::uintptr_t p, allocation& out);
  /// The live allocation containing `p` (interior pointers included).
  [[nodiscard]] std::optional<std::pair<std::uintptr_t, allocation>> find_containing(std::uintptr_t p) const;
  /// Drops every entry (live and tombstone) of `device` (cudaDeviceReset).
  void drop_device(int device);
  /// Visits every live entry under its shard's lock; `fn` must not call back in.
  void for_each_live(std::function<void(std::uintptr_t, allocation const&)> const& fn) const;
  /// Live entries and their bytes.
  [[nodiscard]] std::pair<std::size_t, std::size_t> live_totals() const;
  /// Forked child: forget everything, re-create the locks.
  void reset_after_fork() noexcept;

 private:
  struct record {
    allocation a;
    bool live = true;
  };
  struct alignas(64) shard {
    mutable std::mutex mtx;
    std::map<std::uintptr_t, record> entries;
  };
  static constexpr std::size_t shard_count = 64;
  [[nodiscard]] shard& shard_for(std::uintptr_t p) const noexcept;

  mutable std::array<shard, shard_count> shards_{};
};

/// The process's registry (never destroyed: frees may arrive during exit).
[[nodiscard]] allocation_registry& registry() noexcept;

}  // namespace gpumem::shim
