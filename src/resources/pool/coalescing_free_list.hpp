#pragma once
// coalescing_free_list: the free blocks of one stream (or of the clean list) in
// pool_memory_resource: a coalescing_tree behind a small cache of recent frees.
//
// coalescing_tree: two indexes over the same blocks: a size-ordered set (size, address) for best
// fit, and a map keyed by each block's END address for coalescing with
// neighbours (blocks are disjoint, so that order is also address order). Every
// operation is O(log n). Blocks coalesce only when they are adjacent AND come
// from the same slab (a slab is one upstream allocation: memory of two slabs
// that happen to be adjacent must go back upstream separately).
//
// The hot path allocates no host memory and re-keys little: keyed by its end, a
// block keeps its address-map node when its front is handed out and when a freed
// block joins it from below (the common split and LIFO-free cases); other
// changes re-key the existing nodes (extract, change, re-insert), and the nodes
// freed by an exact fit or a merge are kept (up to spare_limit pairs) for the
// next new blocks: blocks freed elsewhere and merged in later (a reclaimed batch)
// then find nodes waiting for them.
//
// Invariants, checked in debug builds (GPUMEM_ASSERT): both indexes hold the same
// blocks, and total_bytes() is their sum.
//
// The cache: programs free and allocate the same sizes over and over (a training
// step's tensors). The last quick_slots freed blocks wait uncoalesced in a small
// array; a request takes an exact size match from it first, newest first, so the
// common free-then-allocate cycle touches no tree node. A block pushed out of the
// cache, a request the cache cannot match exactly and every query of the whole list
// (largest(), for_each..., merges) go to the tree, after the cache was flushed
// into it where the answer depends on coalescing. Double frees are still refused:
// an insert checks the cache and the tree for overlap, unless the list can prove
// the block is not free here: it is the block the list handed out last, and
// nothing was filed since (the free-after-allocate of the hot path).
//
// Not thread-safe: the owner (one stream's entry) guards it with its mutex.

#include <gpumem/detail/assert.hpp>
#include <gpumem/device_memory_resource.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <iterator>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace gpumem::detail {

/// A block of free memory; as a take's result, a null ptr means none. (Not an
/// optional: returned through memory, an optional's pieces are stored one way and
/// loaded another, and each take paid a store-forwarding stall for it.)
struct free_block {
  char* ptr{};
  std::size_t size{};
  char* slab{};  ///< base of the slab holding the block
  [[nodiscard]] char* end() const noexcept { return ptr + size; }
  explicit operator bool() const noexcept { return ptr != nullptr; }
};

class coalescing_tree {
 public:
  coalescing_tree() = default;
  // A move leaves the source empty, its byte count included.
  coalescing_tree(coalescing_tree&& other) noexcept { *this = std::move(other); }
  coalescing_tree& operator=(coalescing_tree&& other) noexcept {
    if (this == &other) return *this;
    by_end_ = std::move(other.by_end_);
    by_size_ = std::move(other.by_size_);
    total_ = std::exchange(other.total_, 0);
    spare_ends_ = std::move(other.spare_ends_);
    spare_sizes_ = std::move(other.spare_sizes_);
    return *this;
  }
  ~coalescing_tree() = default;
  coalescing_tree(coalescing_tree const&) = delete;
  coalescing_tree& operator=(coalescing_tree const&) = delete;

  /// Inserts `b`, merging it with free neighbours of the same slab. Returns false
  /// (and changes nothing) if `b` overlaps a block already free: a double free.
  bool insert(free_block const& b) {
    // next: the first block ending after b starts; every block before it ends at
    // or before b.ptr, so only next can overlap.
    auto next = by_end_.upper_bound(b.ptr);
    if (next != by_end_.end() && next->second.ptr < b.end()) return false;
    auto prev = next == by_end_.begin() ? by_end_.end() : std::prev(next);

    bool const join_prev = prev != by_end_.end() && prev->second.slab == b.slab && prev->first == b.ptr;
    bool const join_next = next != by_end_.end() && next->second.slab == b.slab && next->second.ptr == b.end();
    if (join_next) {
      // next keeps its end, so its node stays; it grows downwards over b (and prev).
      char* const start = join_prev ? prev->second.ptr : b.ptr;
      if (join_prev) retire(prev);
      rekey_size({size_of(next), next->second.ptr}, {static_cast<std::size_t>(next->first - start), start});
      next->second.ptr = start;
    } else if (join_prev) {
      // prev's end moves up to b.end(): nothing lies between, so its place stays
      // (the hint makes the re-insert O(1)).
      std::size_t const old_size = size_of(prev);
      auto node = extract_node(by_end_, prev);
      node.key() = b.end();
      by_end_.insert(next, std::move(node));
      rekey_size({old_size, b.ptr - old_size}, {old_size + b.size, b.ptr - old_size});
    } else {
      emplace(b);
      check_invariants();
      return true;
    }
    total_ += b.size;
    check_invariants();
    return true;
  }

  /// Whether `b` overlaps a block of the tree.
  [[nodiscard]] bool overlaps(free_block const& b) const noexcept {
    auto const next = by_end_.upper_bound(b.ptr);
    return next != by_end_.end() && next->second.ptr < b.end();
  }

  /// Removes the smallest block of at least `size` bytes (lowest address among
  /// equals), returns its first `size` bytes and keeps the rest free.
  free_block take_best_fit(std::size_t size) { return take_fit(size, true); }

  /// Removes a block of exactly `size` bytes (the lowest address), if there is one.
  free_block take_exact(std::size_t size) {
    auto it = by_size_.lower_bound({size, nullptr});
    if (it == by_size_.end() || it->first != size) return {};
    return take_best_fit(size);
  }

  /// Removes the smallest block of at least `size` bytes (lowest address among
  /// equals) whole, without splitting it.
  free_block take_whole_best_fit(std::size_t size) { return take_fit(size, false); }

  /// Removes exactly the free block starting at `ptr`; false if there is none.
  bool remove(char* ptr) {
    auto const a = by_end_.upper_bound(ptr);
    if (a == by_end_.end() || a->second.ptr != ptr) return false;
    erase(a);
    return true;
  }

  /// Moves every block of `other` here (coalescing); `other` ends empty.
  /// Overlapping blocks (a double free across streams) are dropped.
  void merge_from(coalescing_tree&& other) {
    if (other.by_end_.size() > by_end_.size()) std::swap(*this, other);  // insert the fewer
    for (auto const& [end, rec] : other.by_end_) insert({rec.ptr, static_cast<std::size_t>(end - rec.ptr), rec.slab});
    other.clear();
  }

  [[nodiscard]] bool can_serve(std::size_t size) const noexcept { return largest() >= size; }
  [[nodiscard]] std::size_t largest() const noexcept { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }
  [[nodiscard]] std::size_t total_bytes() const noexcept { return total_; }
  [[nodiscard]] std::size_t free_bytes() const noexcept { return total_; }
  [[nodiscard]] std::size_t block_count() const noexcept { return by_end_.size(); }
  [[nodiscard]] bool empty() const noexcept { return by_end_.empty(); }
  void clear() noexcept {
    by_end_.clear();
    by_size_.clear();
    total_ = 0;
  }

  /// The two indexes agree and total_bytes() is their sum. O(n): debug builds
  /// check it after every change only for small lists, so tests stay fast.
  void check_invariants() const noexcept {
#ifndef NDEBUG
    GPUMEM_ASSERT(by_end_.size() == by_size_.size(), "free list: the size and address indexes disagree");
    if (by_end_.size() > 64) return;
    std::size_t sum = 0;
    char const* prev_end = nullptr;
    for (auto const& [end, rec] : by_end_) {
      GPUMEM_ASSERT(rec.ptr < end, "free list: an empty or inverted block");
      GPUMEM_ASSERT(prev_end == nullptr || prev_end <= rec.ptr, "free list: overlapping blocks");
      GPUMEM_ASSERT(by_size_.contains({static_cast<std::size_t>(end - rec.ptr), rec.ptr}),
                    "free list: a block missing from the size index");
      sum += static_cast<std::size_t>(end - rec.ptr);
      prev_end = end;
    }
    GPUMEM_ASSERT(sum == total_, "free list: the byte total is off");
#endif
  }

  /// The size of the free block ending exactly at `end`; 0 if none does.
  [[nodiscard]] std::size_t bytes_ending_at(char* end) const noexcept {
    auto const it = by_end_.find(end);
    return it == by_end_.end() ? 0 : size_of(it);
  }

  /// Calls f(slab base, bytes) for each block (stream_free_lists' region view).
  template <class F>
  void for_each_piece(F&& f) const {
    for (auto const& [end, rec] : by_end_) f(rec.slab, static_cast<std::size_t>(end - rec.ptr));
  }

  /// Removes every block inside the given regions (anything with .base, .size).
  template <class Regions>
  void remove_regions(Regions const& regions) {
    for (auto const& r : regions) {
      auto it = by_end_.upper_bound(r.base);  // the first block ending after the region starts
      while (it != by_end_.end() && it->second.ptr < r.base + r.size) erase(it++);
    }
  }

  /// Calls f(free_block) for each block in address order.
  template <class F>
  void for_each(F&& f) const {
    for (auto const& [end, rec] : by_end_) f(free_block{rec.ptr, static_cast<std::size_t>(end - rec.ptr), rec.slab});
  }

 private:
  /// take_best_fit (`split`: the block's first `size` bytes) or take_whole_best_fit.
  free_block take_fit(std::size_t size, bool split) {
    auto it = by_size_.lower_bound({size, nullptr});
    if (it == by_size_.end()) return {};
    auto const [block_size, ptr] = *it;
    auto const a = by_end_.find(ptr + block_size);
    std::size_t const taken = split ? size : block_size;
    free_block const b{ptr, taken, a->second.slab};
    total_ -= taken;
    if (taken == block_size) {
      drop(a, it);  // keeps the nodes for the free that will likely follow
      check_invariants();
      return b;
    }
    // The rest keeps the block's end (and so its address-map node); in by_size_ it
    // moves down. When no block sorts between its new and old keys (carving from the
    // largest block, the common case) the node keeps its place and only its key
    // changes: the set's order is unchanged, and the tree is not rebalanced twice.
    a->second.ptr = ptr + size;
    size_key const rest{block_size - size, ptr + size};
    if (it == by_size_.begin() || *std::prev(it) < rest) {
      // A set's elements are not const objects; only their order must not change.
      const_cast<size_key&>(*it) = rest;  // NOLINT(cppcoreguidelines-pro-type-const-cast)
    } else {
      auto node = extract_node(by_size_, it);
      node.value() = rest;
      by_size_.insert(std::move(node));
    }
    check_invariants();
    return b;
  }

  struct record {
    char* ptr;  ///< the block's start
    char* slab;
  };
  using end_map = std::map<char*, record>;         ///< block end -> record
  using size_key = std::pair<std::size_t, char*>;  ///< (size, start)
  using size_set = std::set<size_key>;

  static std::size_t size_of(end_map::const_iterator a) noexcept {
    return static_cast<std::size_t>(a->first - a->second.ptr);
  }

  void emplace(free_block const& b) {
    if (spare_ends_.empty()) {
      by_end_.emplace(b.end(), record{b.ptr, b.slab});
    } else {
      auto& node = spare_ends_.back();
      node.key() = b.end();
      node.mapped() = record{b.ptr, b.slab};
      by_end_.insert(std::move(node));
      spare_ends_.pop_back();
    }
    if (spare_sizes_.empty()) {
      by_size_.emplace(b.size, b.ptr);
    } else {
      auto& node = spare_sizes_.back();
      node.value() = {b.size, b.ptr};
      by_size_.insert(std::move(node));
      spare_sizes_.pop_back();
    }
    total_ += b.size;
  }
  void erase(end_map::iterator a) {
    std::size_t const size = size_of(a);
    by_size_.erase({size, a->second.ptr});
    total_ -= size;
    by_end_.erase(a);
  }
  /// Drops the block at `a` from both indexes, its bytes merged into a neighbour
  /// (so total_ stays).
  void retire(end_map::iterator a) { drop(a, by_size_.find({size_of(a), a->second.ptr})); }
  /// Removes one block's two nodes (`s` is its entry in by_size_), keeping them as
  /// spares while there are fewer than spare_limit.
  void drop(end_map::iterator a, size_set::iterator s) {
    if (spare_sizes_.size() < spare_limit) {
      try {
        spare_sizes_.push_back(by_size_.extract(s));
      } catch (...) {
        // No room to keep it: the node is freed with the handle.
      }
    } else {
      by_size_.erase(s);
    }
    if (spare_ends_.size() < spare_limit) {
      try {
        spare_ends_.push_back(by_end_.extract(a));
      } catch (...) {}
    } else {
      by_end_.erase(a);
    }
  }
  /// Changes a by_size_ entry (both indexes always hold every block, so `from` exists).
  void rekey_size(std::pair<std::size_t, char*> from, std::pair<std::size_t, char*> to) {
    auto node = extract_node(by_size_, by_size_.find(from));
    node.value() = to;
    by_size_.insert(std::move(node));
  }
  /// extract() of an element's iterator never returns an empty handle; telling the
  /// compiler so costs nothing and spares -Wnull-dereference false positives.
  template <class Tree>
  static typename Tree::node_type extract_node(Tree& tree, typename Tree::const_iterator it) {
    auto node = tree.extract(it);
    if (node.empty()) __builtin_unreachable();
    return node;
  }

  /// Spare node pairs kept for new blocks: enough for the blocks a reclaimed batch
  /// typically brings, few enough to be negligible host memory.
  static constexpr std::size_t spare_limit = 256;

  end_map by_end_;
  size_set by_size_;
  std::size_t total_ = 0;
  std::vector<end_map::node_type> spare_ends_;  ///< nodes a merge or exact fit freed (reused by emplace)
  std::vector<size_set::node_type> spare_sizes_;
};

class coalescing_free_list {
 public:
  using block_type = free_block;
  /// Recent frees kept uncoalesced: a few, so scanning them costs less than one tree step.
  static constexpr std::size_t quick_slots = 8;

  // Move-only, as its tree: a copy would hand every block out twice. A move leaves the
  // source empty, its recent frees included: the implicit move copied the quick
  // slots, so a list moved away (a destroyed stream's, into a foreign batch) still
  // held up to quick_slots of the blocks it had given away.
  coalescing_free_list() = default;
  coalescing_free_list(coalescing_free_list&& other) noexcept { *this = std::move(other); }
  coalescing_free_list& operator=(coalescing_free_list&& other) noexcept {
    if (this == &other) return *this;
    tree_ = std::move(other.tree_);
    quick_ = other.quick_;
    quick_n_ = std::exchange(other.quick_n_, 0);
    batch_ = std::move(other.batch_);
    other.batch_.clear();
    lent_ptr_ = std::exchange(other.lent_ptr_, nullptr);
    lent_size_ = std::exchange(other.lent_size_, 0);
    return *this;
  }
  coalescing_free_list(coalescing_free_list const&) = delete;
  coalescing_free_list& operator=(coalescing_free_list const&) = delete;
  ~coalescing_free_list() = default;

  /// Files a freed block. Returns false (and changes nothing) if it overlaps a block
  /// already free: a double free.
  bool insert(free_block const& b) {
    file_batch();
    if (!is_lent(b) && (overlaps_cached(b) || tree_.overlaps(b))) return false;
    lent_ptr_ = nullptr;
    if (quick_n_ == quick_slots) {
      // The oldest goes to the tree (where it coalesces); the newest stays at hand.
      to_tree(quick_[0]);
      remove_cached(0);
    }
    quick_[quick_n_++] = b;
    return true;
  }
  /// A block of a batch (stream_free_lists' reclaimed memory): straight into the tree,
  /// where it coalesces, past the cache (kept for the frees of the hot path). One
  /// overlapping a free block is dropped.
  void add(free_block const& b) {
    file_batch();
    lent_ptr_ = nullptr;
    add_to_tree(b);
  }

  /// add() for every block of a batch (a reclaim's pending frees), deferred: the
  /// blocks are appended as they are and filed in the tree when the list is next
  /// used, by whoever uses it. A reclaim files thousands of blocks into the clean
  /// shards of stream_free_lists while threads wait for it; filing them there cost
  /// ~300 ns a block on an H100 with 16 threads freeing (1.2 ms a reclaim), where
  /// each shard's own thread files its share, in parallel with the others. Filed,
  /// neighbours of one slab are joined first: a program that frees what it
  /// allocated from one clean block frees neighbours one after the other (in
  /// address order or its reverse), and one coalescing insert per run of
  /// neighbours costs a fraction of one per block.
  void add_all(std::vector<free_block> const& blocks) {
    lent_ptr_ = nullptr;
    batch_.insert(batch_.end(), blocks.begin(), blocks.end());
  }

  /// Hands out again at once a block that was freed but never filed here (a
  /// stream's deferred free): false if it overlaps a free block of the list (a
  /// double free: it must not be handed out).
  [[nodiscard]] bool reissue(free_block const& b) noexcept {
    if (!batch_.empty()) return false;  // the batch may hold it: the caller files it (insert checks)
    if (!is_lent(b) && (overlaps_cached(b) || tree_.overlaps(b))) return false;
    lend(b);
    return true;
  }

  /// The smallest block of at least `size` bytes (exact sizes from the cache first,
  /// newest first), split: its first `size` bytes are returned, the rest stays free.
  free_block take_best_fit(std::size_t size) {
    file_batch();
    return lend(best_fit(size));
  }

  /// A block of exactly `size` bytes (cache first, then the tree), if there is one.
  free_block take_exact(std::size_t size) {
    file_batch();
    if (auto b = take_cached(size)) return lend(b);
    return lend(tree_.take_exact(size));
  }

  /// The smallest block of at least `size` bytes whole, without splitting it.
  free_block take_whole_best_fit(std::size_t size) {
    flush();
    return lend(tree_.take_whole_best_fit(size));
  }

  /// Removes exactly the free block starting at `ptr`; false if there is none.
  bool remove(char* ptr) {
    flush();
    return tree_.remove(ptr);
  }

  /// Moves every block of `other` here (coalescing); `other` ends empty.
  /// Overlapping blocks (a double free across streams) are dropped.
  void merge_from(coalescing_free_list&& other) {
    lent_ptr_ = nullptr;
    flush();
    other.flush();
    tree_.merge_from(std::move(other.tree_));
  }

  /// share_into(): the most the taker gets of the victim's block, and the largest
  /// request that shares at all.
  static constexpr std::size_t share_cap = std::size_t{8} << 20;
  static constexpr std::size_t share_max_request = std::size_t{1} << 20;

  /// Moves every block into `out` (as out.merge_from(*this)), except when the list
  /// is ONE free block that is at least twice `size`, with `size` at most
  /// share_max_request: then `out` gets only the block's back, max(size, min(half,
  /// share_cap)) (a multiple of allocation_alignment, as every block is), and the
  /// front stays. For two streams taking each other's memory in turn: the victim
  /// keeps the memory it will most likely ask for next, so they settle after one
  /// take each (taking everything had each take the other's whole list back: an
  /// event record and a wait per allocation). The limits keep free memory together
  /// where that matters more: a cut makes a second place where allocations land,
  /// and under memory pressure the pieces between them fragment the pool (cutting
  /// for every take, or below a few blocks, failed 2-3x more allocations at a
  /// nearly full device in a 5-million-call multi-stream replay). Out of host
  /// memory for the front's bookkeeping, the front is lost to the pool.
  void share_into(coalescing_free_list& out, std::size_t size) {
    flush();
    lent_ptr_ = nullptr;
    std::size_t const largest = tree_.largest();
    std::size_t const half = largest / 2;
    std::size_t const back = align_down(std::max(size, std::min(half, share_cap)), allocation_alignment);
    bool const share = tree_.block_count() == 1 && size <= half && size <= share_max_request && back != 0;
    free_block const whole = share ? tree_.take_whole_best_fit(largest) : free_block{};
    out.merge_from(std::move(*this));
    if (!whole) return;
    tree_.insert({whole.ptr, whole.size - back, whole.slab});  // the only block: cannot overlap
    out.add({whole.ptr + whole.size - back, back, whole.slab});
  }

  [[nodiscard]] bool can_serve(std::size_t size) const noexcept { return largest() >= size; }
  [[nodiscard]] std::size_t largest() const noexcept {
    flush();
    return tree_.largest();
  }
  /// Files the batch first (a double free in it is dropped, not counted).
  [[nodiscard]] std::size_t total_bytes() const {
    file_batch();
    return tree_.total_bytes() + quick_bytes();
  }
  [[nodiscard]] std::size_t free_bytes() const { return total_bytes(); }
  [[nodiscard]] std::size_t block_count() const noexcept {
    flush();
    return tree_.block_count();
  }
  /// Without filing the batch: a batch of double frees only counts as not empty.
  [[nodiscard]] bool empty() const noexcept { return quick_n_ == 0 && tree_.empty() && batch_.empty(); }
  void clear() noexcept {
    quick_n_ = 0;
    tree_.clear();
    batch_.clear();
  }

  /// The size of the free block ending exactly at `end` (coalesced); 0 if none does.
  [[nodiscard]] std::size_t bytes_ending_at(char* end) const {
    flush();
    return tree_.bytes_ending_at(end);
  }

  /// Calls f(slab base, bytes) for each block (stream_free_lists' region view).
  template <class F>
  void for_each_piece(F&& f) const {
    flush();
    tree_.for_each_piece(f);
  }
  /// Removes every block inside the given regions (anything with .base, .size).
  template <class Regions>
  void remove_regions(Regions const& regions) {
    flush();
    tree_.remove_regions(regions);
  }
  /// Calls f(free_block) for each block in address order.
  template <class F>
  void for_each(F&& f) const {
    flush();
    tree_.for_each(f);
  }
  /// The tree's invariants (the cache is flushed first).
  void check_invariants() const noexcept {
    flush();
    tree_.check_invariants();
  }

 private:
  free_block best_fit(std::size_t size) {
    if (auto b = take_cached(size)) return b;
    // A larger cached block may fit better than the tree's best: decide on everything.
    bool const larger_cached = std::any_of(quick_.begin(), quick_.begin() + quick_n_,
                                           [size](free_block const& c) { return c.size > size; });
    if (larger_cached) flush();
    if (auto b = tree_.take_best_fit(size)) return b;
    if (quick_n_ == 0) return {};
    flush();  // smaller cached blocks, coalesced with their neighbours, may fit
    return tree_.take_best_fit(size);
  }
  /// Remembers a block handed out (lent_ptr_); returns it.
  free_block lend(free_block const& b) noexcept {
    if (b) {
      lent_ptr_ = b.ptr;
      lent_size_ = b.size;
    }
    return b;
  }
  [[nodiscard]] bool is_lent(free_block const& b) const noexcept {
    return b.ptr == lent_ptr_ && b.size == lent_size_ && b.ptr != nullptr;
  }
  [[nodiscard]] std::size_t quick_bytes() const noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < quick_n_; ++i) n += quick_[i].size;
    return n;
  }
  [[nodiscard]] bool overlaps_cached(free_block const& b) const noexcept {
    return std::any_of(quick_.begin(), quick_.begin() + quick_n_,
                       [&b](free_block const& c) { return c.ptr < b.end() && b.ptr < c.end(); });
  }
  /// The newest cached block of exactly `size` bytes, taken out of the cache.
  free_block take_cached(std::size_t size) noexcept {
    for (std::size_t i = quick_n_; i-- > 0;) {
      if (quick_[i].size == size) {
        free_block const b = quick_[i];
        remove_cached(i);
        return b;
      }
    }
    return {};
  }
  void remove_cached(std::size_t i) const noexcept {
    for (std::size_t j = i + 1; j < quick_n_; ++j) quick_[j - 1] = quick_[j];
    --quick_n_;
  }
  /// A cached block into the tree (the cache never holds a block that overlaps it).
  void to_tree(free_block const& b) const {
    bool const ok = tree_.insert(b);
    GPUMEM_ASSERT(ok, "free list: a cached block overlapped the tree");
    static_cast<void>(ok);
  }
  /// Moves the cached blocks and the batch into the tree (const: observers see
  /// coalesced blocks).
  void flush() const {
    file_batch();
    for (std::size_t i = 0; i < quick_n_; ++i) to_tree(quick_[i]);
    quick_n_ = 0;
  }
  /// A block into the tree unless it overlaps a free one (a double free: dropped).
  void add_to_tree(free_block const& b) const {
    if (!overlaps_cached(b)) static_cast<void>(tree_.insert(b));
  }
  /// Files the batch (add_all), runs of neighbours joined. Before anything that
  /// reads or changes the tree or the cache.
  void file_batch() const {
    if (batch_.empty()) [[likely]]
      return;
    std::size_t i = 0;
    while (i < batch_.size()) {
      free_block run = batch_[i];
      for (++i; i < batch_.size() && batch_[i].slab == run.slab; ++i) {
        auto const& b = batch_[i];
        if (b.ptr == run.end()) {
          run.size += b.size;
        } else if (b.end() == run.ptr) {
          run.ptr = b.ptr;
          run.size += b.size;
        } else {
          break;
        }
      }
      add_to_tree(run);
    }
    batch_.clear();  // the capacity is kept for the next reclaim
  }

  mutable coalescing_tree tree_;
  mutable std::array<free_block, quick_slots> quick_{};  ///< oldest first
  mutable std::size_t quick_n_ = 0;
  mutable std::vector<free_block> batch_;  ///< add_all()'s blocks, not filed yet
  /// The block handed out last, while nothing was filed since (null: none). It is
  /// then not free here, so filing it back needs no overlap check: a range becomes
  /// free here only by a filing (insert, add, merge_from), and each one clears it.
  char* lent_ptr_ = nullptr;
  std::size_t lent_size_ = 0;
};

}  // namespace gpumem::detail
