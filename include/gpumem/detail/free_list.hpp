#pragma once
// coalescing_free_list: the free blocks of one stream in pool_memory_resource.
//
// Two indexes over the same blocks: a size-ordered set (size, address) for best
// fit, and an address-ordered map for coalescing with neighbours. Every
// operation is O(log n). Blocks coalesce only when they are adjacent AND come
// from the same slab (a slab is one upstream allocation: memory of two slabs
// that happen to be adjacent must go back upstream separately).
//
// Not thread-safe: the owner (one stream's entry) guards it with its mutex.

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace gpumem::detail {

struct free_block {
  char* ptr{};
  std::size_t size{};
  char* slab{};  ///< base of the slab holding the block
  [[nodiscard]] char* end() const noexcept { return ptr + size; }
};

class coalescing_free_list {
 public:
  /// Inserts `b`, merging it with free neighbours of the same slab. Returns false
  /// (and changes nothing) if `b` overlaps a block already free: a double free.
  bool insert(free_block b) {
    auto next = by_addr_.lower_bound(b.ptr);
    if (next != by_addr_.end() && next->first < b.end()) return false;
    auto prev = next == by_addr_.begin() ? by_addr_.end() : std::prev(next);
    if (prev != by_addr_.end() && prev->first + prev->second.size > b.ptr) return false;

    if (prev != by_addr_.end() && prev->second.slab == b.slab && prev->first + prev->second.size == b.ptr) {
      b.ptr = prev->first;
      b.size += prev->second.size;
      erase(prev);
    }
    if (next != by_addr_.end() && next->second.slab == b.slab && next->first == b.end()) {
      b.size += next->second.size;
      erase(next);
    }
    emplace(b);
    return true;
  }

  /// Removes the smallest block of at least `size` bytes (lowest address among
  /// equals), returns its first `size` bytes and keeps the rest free.
  std::optional<free_block> take_best_fit(std::size_t size) {
    auto it = by_size_.lower_bound({size, nullptr});
    if (it == by_size_.end()) return std::nullopt;
    auto const a = by_addr_.find(it->second);
    free_block const b{a->first, a->second.size, a->second.slab};
    erase(a);
    if (b.size > size) emplace({b.ptr + size, b.size - size, b.slab});  // neighbours are not free
    return free_block{b.ptr, size, b.slab};
  }

  /// Removes exactly the free block starting at `ptr`; false if there is none.
  bool remove(char* ptr) {
    auto const a = by_addr_.find(ptr);
    if (a == by_addr_.end()) return false;
    erase(a);
    return true;
  }

  /// Moves every block of `other` here (coalescing); `other` ends empty.
  /// Overlapping blocks (a double free across streams) are dropped.
  void merge_from(coalescing_free_list&& other) {
    if (other.by_addr_.size() > by_addr_.size()) std::swap(*this, other);  // insert the fewer
    for (auto const& [ptr, rec] : other.by_addr_) insert({ptr, rec.size, rec.slab});
    other.clear();
  }

  [[nodiscard]] bool can_serve(std::size_t size) const noexcept { return largest() >= size; }
  [[nodiscard]] std::size_t largest() const noexcept {
    return by_size_.empty() ? 0 : by_size_.rbegin()->first;
  }
  [[nodiscard]] std::size_t total_bytes() const noexcept { return total_; }
  [[nodiscard]] std::size_t block_count() const noexcept { return by_addr_.size(); }
  [[nodiscard]] bool empty() const noexcept { return by_addr_.empty(); }
  void clear() noexcept {
    by_addr_.clear();
    by_size_.clear();
    total_ = 0;
  }

  /// Calls f(slab base, bytes) for each block (stream_free_lists' region view).
  template <class F>
  void for_each_piece(F&& f) const {
    for (auto const& [ptr, rec] : by_addr_) f(rec.slab, rec.size);
  }

  /// Removes every block inside the given regions (anything with .base, .size).
  template <class Regions>
  void remove_regions(Regions const& regions) {
    for (auto const& r : regions) {
      auto it = by_addr_.lower_bound(r.base);
      while (it != by_addr_.end() && it->first < r.base + r.size) erase(it++);
    }
  }

  /// Calls f(free_block) for each block in address order.
  template <class F>
  void for_each(F&& f) const {
    for (auto const& [ptr, rec] : by_addr_) f(free_block{ptr, rec.size, rec.slab});
  }

 private:
  struct record {
    std::size_t size;
    char* slab;
  };
  using addr_map = std::map<char*, record>;

  void emplace(free_block b) {
    by_addr_.emplace(b.ptr, record{b.size, b.slab});
    by_size_.emplace(b.size, b.ptr);
    total_ += b.size;
  }
  void erase(addr_map::iterator a) {
    by_size_.erase({a->second.size, a->first});
    total_ -= a->second.size;
    by_addr_.erase(a);
  }

  addr_map by_addr_;
  std::set<std::pair<std::size_t, char*>> by_size_;
  std::size_t total_ = 0;
};

}  // namespace gpumem::detail
