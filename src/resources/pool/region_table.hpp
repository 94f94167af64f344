#pragma once
// region_table<Payload>: the upstream allocations ("regions": a pool's slabs,
// fixed_size's chunks) that a stream-ordered caching resource holds, keyed by base
// address, and the bytes they add up to.
//
// Lookups are the hot path (every deallocate finds its region): each thread keeps
// its last answer per table as a hint, valid while the table's generation (bumped
// whenever a region leaves) is unchanged, so the common case takes no lock and
// touches no shared cache line but the generation. Otherwise a shared lock and a
// search of the ordered map.
//
// A region may be extended (extend()) by an upstream allocation that continues it
// in one range of virtual addresses (device_memory_resource::extends): it then
// consists of several upstream allocations, its pieces, each given back on its own.
//
// A Payload (fixed_size's per-chunk block bits) lives in the map node, at an
// address stable until its region is erased. find() may hand out a region that
// another thread erases at once: callers look up only memory they hold (a live
// block keeps its region from being released), and a pointer that is not theirs
// (a double free of a released region) is the program's bug either way.
//
// Invariants, checked in debug builds (GPUMEM_ASSERT): regions are disjoint, and
// reserved_bytes() is the sum of their sizes.
//
// Thread safety: every member is thread-safe. The table's mutex is a leaf lock
// (nothing else is locked while it is held).

#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/stream_ordering.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <utility>
#include <vector>

namespace gpumem::detail {

/// The payload of a region that needs none (the pool's slabs).
struct no_payload {};

template <class Payload = no_payload>
class region_table {
 public:
  /// A region as find() reports it; a null base means "none".
  struct region {
    char* base{};
    std::size_t size{};
    Payload* payload{};
    explicit operator bool() const noexcept { return base != nullptr; }
  };

  region_table() = default;
  region_table(region_table const&) = delete;
  region_table& operator=(region_table const&) = delete;

  /// The region holding `p`, if any.
  [[nodiscard]] region find(void const* p) noexcept {
    auto const at = reinterpret_cast<std::uintptr_t>(p);
    auto& h = hints()[instance_ % thread_cache_slots];
    auto const generation = generation_.load(std::memory_order_acquire);  // before the lookup
    if (h.instance == instance_ && h.generation == generation && inside(at, h.found)) return h.found;
    std::shared_lock lock{mutex_};
    auto it = regions_.upper_bound(const_cast<char*>(static_cast<char const*>(p)));
    if (it == regions_.begin()) return {};
    --it;
    region const found{it->first, it->second.size, &it->second.payload};
    if (!inside(at, found)) return {};
    h = {instance_, generation, found};
    return found;
  }

  /// Whether `p` lies inside a region.
  [[nodiscard]] bool contains(void const* p) noexcept { return static_cast<bool>(find(p)); }

  /// The size of the region starting exactly at `base`; 0 if there is none.
  [[nodiscard]] std::size_t size_at(char* base) const {
    std::shared_lock lock{mutex_};
    auto const it = regions_.find(base);
    return it == regions_.end() ? 0 : it->second.size;
  }

  /// Registers a region; its payload is constructed from `args`. Returns the
  /// payload. Throws (changing nothing) if no host memory is left for the node.
  template <class... Args>
  Payload& insert(char* base, std::size_t size, Args&&... args) {
    std::unique_lock lock{mutex_};
    auto [it, inserted] = regions_.try_emplace(base, size, std::forward<Args>(args)...);
    GPUMEM_ASSERT(inserted, "region table: a region registered twice");
    if (inserted) reserved_.fetch_add(size, std::memory_order_relaxed);
    check_invariants_locked();
    return it->second.payload;
  }

  /// Grows the region starting at `base` by `added` bytes, an upstream allocation
  /// that begins where the region ends (invalidating every thread's hints: a stale
  /// one would call a block across the seam foreign). False if there is no such region.
  bool extend(char* base, std::size_t added) {
    std::unique_lock lock{mutex_};
    auto const it = regions_.find(base);
    if (it == regions_.end()) return false;
    node& n = it->second;
    if (n.pieces.empty()) n.pieces.emplace_back(base, n.size);  // may throw: nothing changed yet
    n.pieces.emplace_back(base + n.size, added);
    n.size += added;
    generation_.fetch_add(1, std::memory_order_release);
    reserved_.fetch_add(added, std::memory_order_relaxed);
    check_invariants_locked();
    return true;
  }

  /// The upstream allocations making up the region starting at `base`, in address
  /// order: {base, size} unless it was extended; empty if there is no such region.
  [[nodiscard]] std::vector<std::pair<char*, std::size_t>> pieces(char* base) const {
    std::shared_lock lock{mutex_};
    auto const it = regions_.find(base);
    if (it == regions_.end()) return {};
    if (it->second.pieces.empty()) return {{base, it->second.size}};
    return it->second.pieces;
  }

  /// The regions made of several pieces (base, size), in address order.
  [[nodiscard]] std::vector<std::pair<char*, std::size_t>> extended() const {
    std::shared_lock lock{mutex_};
    std::vector<std::pair<char*, std::size_t>> out;
    for (auto const& [base, n] : regions_) {
      if (!n.pieces.empty()) out.emplace_back(base, n.size);
    }
    return out;
  }

  /// Cuts the extended region starting at `base` before its first piece that starts
  /// at or after `from` (never its first piece) and returns the pieces cut off, in
  /// address order; none if no piece starts there. Invalidates every thread's hints.
  std::vector<std::pair<char*, std::size_t>> cut_pieces_from(char* base, char const* from) {
    std::unique_lock lock{mutex_};
    auto const it = regions_.find(base);
    if (it == regions_.end() || it->second.pieces.size() < 2) return {};
    auto& pieces = it->second.pieces;
    auto first = std::find_if(pieces.begin() + 1, pieces.end(), [&](auto const& q) { return q.first >= from; });
    std::vector<std::pair<char*, std::size_t>> cut(first, pieces.end());
    if (cut.empty()) return cut;
    pieces.erase(first, pieces.end());
    std::size_t removed = 0;
    for (auto const& q : cut) removed += q.second;
    it->second.size -= removed;
    if (pieces.size() == 1) pieces.clear();  // one piece again: the region itself
    generation_.fetch_add(1, std::memory_order_release);
    reserved_.fetch_sub(removed, std::memory_order_relaxed);
    check_invariants_locked();
    return cut;
  }

  /// Removes the region starting at `base` (invalidating every thread's hints);
  /// returns its size, 0 if there was none.
  std::size_t erase(char* base) noexcept {
    std::unique_lock lock{mutex_};
    auto const it = regions_.find(base);
    if (it == regions_.end()) return 0;
    std::size_t const size = it->second.size;
    regions_.erase(it);
    generation_.fetch_add(1, std::memory_order_release);
    reserved_.fetch_sub(size, std::memory_order_relaxed);
    check_invariants_locked();
    return size;
  }

  /// Sum of the regions' sizes.
  [[nodiscard]] std::size_t reserved_bytes() const noexcept { return reserved_.load(std::memory_order_relaxed); }

  /// Calls f(base, size) for every region, in address order, under the shared lock
  /// (f must not call back into the table).
  template <class F>
  void for_each(F&& f) const {
    std::shared_lock lock{mutex_};
    for (auto const& [base, n] : regions_) f(base, n.size);
  }

  /// Calls f(base, size) for every upstream allocation (each piece of an extended
  /// region), in address order, under the shared lock.
  template <class F>
  void for_each_piece(F&& f) const {
    std::shared_lock lock{mutex_};
    for (auto const& [base, n] : regions_) {
      if (n.pieces.empty()) {
        f(base, n.size);
      } else {
        for (auto const& [b, size] : n.pieces) f(b, size);
      }
    }
  }

  /// Regions disjoint, reserved_bytes() their sum. O(n): debug builds check it
  /// after every change only for small tables, so tests stay fast.
  void check_invariants() const noexcept {
    std::shared_lock lock{mutex_};
    check_invariants_locked();
  }

 private:
  struct node {
    template <class... Args>
    explicit node(std::size_t n, Args&&... args) : size{n}, payload{std::forward<Args>(args)...} {}
    std::size_t size;
    Payload payload;
    std::vector<std::pair<char*, std::size_t>> pieces;  ///< empty: one piece, the region itself
  };
  struct hint {
    std::uint64_t instance{};
    std::uint64_t generation{};
    region found{};
  };

  static std::array<hint, thread_cache_slots>& hints() noexcept {
    thread_local std::array<hint, thread_cache_slots> h{};
    return h;
  }
  static bool inside(std::uintptr_t at, region const& r) noexcept {
    auto const b = reinterpret_cast<std::uintptr_t>(r.base);
    return r.base != nullptr && at >= b && at - b < r.size;
  }

  void check_invariants_locked() const noexcept {
#ifndef NDEBUG
    if (regions_.size() > 64) return;
    std::size_t sum = 0;
    char const* prev_end = nullptr;
    for (auto const& [base, n] : regions_) {
      GPUMEM_ASSERT(n.size != 0, "region table: an empty region");
      GPUMEM_ASSERT(prev_end == nullptr || prev_end <= base, "region table: overlapping regions");
      sum += n.size;
      prev_end = base + n.size;
    }
    GPUMEM_ASSERT(sum == reserved_.load(std::memory_order_relaxed),
                  "region table: reserved bytes disagree with the regions");
#endif
  }

  std::uint64_t const instance_ = next_instance_id<region_table>();
  std::atomic<std::uint64_t> generation_{0};  ///< bumped whenever a region leaves
  std::atomic<std::size_t> reserved_{0};      ///< changed under mutex_; read without it
  mutable std::shared_mutex mutex_;
  std::map<char*, node> regions_;  ///< base -> size and payload
};

}  // namespace gpumem::detail
