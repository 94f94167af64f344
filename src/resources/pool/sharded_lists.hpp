#pragma once
// The sharded lists of stream_free_lists: CLEAN memory (no queued GPU work can
// touch it) and PENDING memory (freed with synchronous semantics, waiting for a
// barrier), each split into shard_count shards.
//
// Clean and pending memory are split into shard_count shards, and each thread
// works in one of them (shard_index(): threads are dealt to shards in turn as they
// first come). Synchronous allocations and frees touch no shared cache line in the
// common case: a thread frees into its pending shard, a reclaim files each pending
// shard into the clean shard of the same index (the thread that freed a block
// most likely asks for that size again), and a synchronous allocation takes from
// its own clean shard. One list for all threads made every synchronous allocation
// take the same lock and move the same cache lines: measured through the shim on an
// H100, 3.1 M cudaMalloc+cudaFree pairs/s on one thread fell to 1.3 M/s on 16. All
// clean memory is equally clean, so a thread whose shard cannot serve it takes
// from the others (the resource's policy; clean_hint() says which have memory).
// Blocks in different shards do not coalesce with each other; a resource joins
// the shards (join_clean_into()) before it would grow for want of a block they
// hold between them. A single-threaded program uses one shard, as it used the one
// list before.
//
// Thread safety: each shard has its own lock; the clean shards are stream_entry
// objects locked as entries (lock order: the clean shards come first among the
// entries, in index order), the pending shards spin_mutexes taken last
// (stream_free_lists.hpp, "Locking"). Counts that readers sum without locks change
// only under their shard's lock.

#include "stream_entry.hpp"

#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/spin_mutex.hpp>
#include <gpumem/detail/stream_ordering.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace gpumem::detail {

/// Shards of clean and pending memory.
inline constexpr std::size_t shard_count = 16;

/// The calling thread's shard of clean and pending memory (stream_free_lists),
/// plus one; 0 until the thread first asks. Shared by every stream_free_lists.
inline thread_local std::size_t tl_shard_plus_one = 0;
/// The next shard to deal to a thread.
inline std::atomic<std::size_t> g_next_shard{0};

/// The calling thread's shard: threads are dealt to shards in turn, as they
/// first ask, so up to shard_count threads get one each.
[[nodiscard]] inline std::size_t shard_index() noexcept {
  if (tl_shard_plus_one == 0) [[unlikely]]
    tl_shard_plus_one = g_next_shard.fetch_add(1, std::memory_order_relaxed) % shard_count + 1;
  return tl_shard_plus_one - 1;
}

/// Which clean shards clean_shards::take() looks in after the calling thread's own.
enum class shard_choice {
  own,     ///< none
  hinted,  ///< those clean_shards::hint() names
  every    ///< all of them: for a caller about to grow, which must not miss memory
};

/// The clean shards: one stream_entry each, on no stream (the legacy stream's
/// handle, key 0), which never defers a free.
template <class List>
class clean_shards {
 public:
  using entry = stream_entry<List>;
  using entry_ptr = std::shared_ptr<entry>;
  /// Key 0 is no stream's (stream_key never returns 0), so a clean entry sorts first.
  static constexpr std::uintptr_t key = 0;

  /// Shard `i` (< shard_count); lives as long as this object.
  [[nodiscard]] entry& operator[](std::size_t i) noexcept { return *shards_[i]; }
  [[nodiscard]] std::array<entry_ptr, shard_count> const& entries() const noexcept { return shards_; }

  /// Which shards may hold memory: bit i for shard i. A hint for a thread looking
  /// beyond its own shard, kept by the resource (note()): a shard may hold memory
  /// with its bit clear, so a look that must not miss memory (before growing)
  /// walks every shard.
  [[nodiscard]] std::uint32_t hint() const noexcept { return hint_.load(std::memory_order_relaxed); }
  /// Under shard i's lock, after filing memory there or taking some: updates its
  /// bit (one atomic read-modify-write, only when the bit changes).
  void note(std::size_t i) noexcept {
    std::uint32_t const bit = std::uint32_t{1} << i;
    bool const has = !shards_[i]->list.empty();
    if (((hint_.load(std::memory_order_relaxed) & bit) != 0) == has) return;
    if (has) {
      hint_.fetch_or(bit, std::memory_order_relaxed);
    } else {
      hint_.fetch_and(~bit, std::memory_order_relaxed);
    }
  }

  /// Calls take(List&) on the calling thread's shard, then on the others `which`
  /// names, each under its lock, until one returns something (a result that
  /// converts to true); keeps the hint. Returns that result, or an empty one.
  template <class Take>
  auto take(shard_choice which, Take&& take) -> decltype(take(std::declval<List&>())) {
    std::size_t const mine = shard_index();
    std::uint32_t const bits = which == shard_choice::every ? ~std::uint32_t{0} : hint();
    std::size_t const looks = which == shard_choice::own ? 1 : shard_count;
    for (std::size_t k = 0; k < looks; ++k) {
      std::size_t const i = (mine + k) % shard_count;
      if (k != 0 && (bits & (std::uint32_t{1} << i)) == 0) continue;
      entry& e = *shards_[i];
      std::lock_guard lock{e.mutex};  // clean shards never defer a free: nothing to settle
      if (auto got = take(e.list)) {
        note(i);
        return got;
      }
    }
    return {};
  }

  /// Moves every other shard's memory into shard `into`, where neighbours
  /// coalesce: for a request none of the shards can serve alone. Nothing moves
  /// unless the shards hold at least `needed` bytes together. Takes the shards'
  /// locks in index order. Returns the bytes moved.
  std::size_t join_into(std::size_t into, std::size_t needed) {
    std::array<std::unique_lock<entry>, shard_count> locks;
    std::size_t total = 0;
    for (std::size_t i = 0; i < shard_count; ++i) {
      locks[i] = std::unique_lock<entry>{*shards_[i]};
      total += shards_[i]->list.free_bytes();
    }
    if (total < needed) return 0;
    std::size_t moved = 0;
    for (std::size_t i = 0; i < shard_count; ++i) {
      if (i == into || shards_[i]->list.empty()) continue;
      moved += shards_[i]->list.free_bytes();
      shards_[into]->list.merge_from(std::move(shards_[i]->list));
      shards_[i]->list = List{};
      note(i);
    }
    note(into);
    return moved;
  }

 private:
  static std::array<entry_ptr, shard_count> make() {
    std::array<entry_ptr, shard_count> shards;
    for (auto& e : shards) {
      e = std::make_shared<entry>(stream_identity{key, reinterpret_cast<CUstream>(legacy_stream_handle), 0}, true);
    }
    return shards;
  }

  std::array<entry_ptr, shard_count> const shards_ = make();
  alignas(64) std::atomic<std::uint32_t> hint_{0};  ///< hint(): read on every take, its own line
};

/// The pending shards: blocks freed with synchronous semantics, by the freeing
/// thread's shard, with their counts (exact, summed over the shards, and an
/// estimate on one cache line for hot paths).
template <class Block>
class pending_shards {
 public:
  struct totals {
    std::size_t bytes = 0;
    std::size_t blocks = 0;
  };
  /// A shard publishes its counts to estimate() once it has this many bytes or
  /// blocks not yet published: a thread freeing small blocks writes the shared
  /// line once per 16 frees.
  static constexpr std::size_t publish_bytes = std::size_t{64} << 10;
  static constexpr std::size_t publish_blocks = 16;

  /// Files `b` in the calling thread's shard; `bytes` is what it counts for.
  /// False (the block is lost to reuse, never handed out twice) if no host memory
  /// is left for the bookkeeping.
  bool add(Block b, std::size_t bytes) noexcept {
    auto& sh = shards_[shard_index()];
    try {
      std::lock_guard lock{sh.mutex};
      sh.blocks.push_back(b);
      sh.add(bytes, 1);
      publish_locked(sh);
    } catch (...) { return false; }
    return true;
  }
  /// The exact totals: one pass over the shards, without their locks.
  [[nodiscard]] totals exact() const noexcept {
    totals t;
    for (auto const& sh : shards_) {
      t.bytes += sh.bytes.load(std::memory_order_relaxed);
      t.blocks += sh.blocks_n.load(std::memory_order_relaxed);
    }
    return t;
  }
  /// exact() for a hot path: two loads of one cache line, which the shards write
  /// only once per publish_bytes or publish_blocks freed into them. At most the
  /// exact totals, and short of them by less than that much per shard.
  [[nodiscard]] totals estimate() const noexcept {
    return {estimate_.bytes.load(std::memory_order_relaxed), estimate_.blocks.load(std::memory_order_relaxed)};
  }
  /// The most estimate() has counted: the peak between reclamations, not only at
  /// them (short of the exact peak by less than publish_bytes per shard).
  [[nodiscard]] std::size_t peak_estimate() const noexcept { return estimate_.peak.load(std::memory_order_relaxed); }

  /// For a reclamation: moves shard i's blocks into `out` (empty; the shard keeps
  /// its capacity) and what they counted for into `bytes`. False if it held none
  /// (a shard that reads as empty without its lock is skipped).
  bool take(std::size_t i, std::vector<Block>& out, std::size_t& bytes) noexcept {
    auto& sh = shards_[i];
    if (sh.blocks_n.load(std::memory_order_relaxed) == 0) return false;
    std::lock_guard lock{sh.mutex};
    if (sh.blocks.empty()) return false;
    out.swap(sh.blocks);
    bytes = sh.bytes.load(std::memory_order_relaxed);
    take_counts_locked(sh);
    return true;
  }
  /// Undoes take(i, blocks, bytes) for a reclamation that made no barrier.
  void put_back(std::size_t i, std::vector<Block> const& blocks, std::size_t bytes) noexcept {
    auto& sh = shards_[i];
    try {
      std::lock_guard lock{sh.mutex};
      sh.blocks.insert(sh.blocks.end(), blocks.begin(), blocks.end());
      sh.add(bytes, blocks.size());
      publish_locked(sh);
    } catch (...) {
      // No host memory: those blocks are lost to reuse (never handed out early).
    }
  }

#ifndef NDEBUG
  /// Each shard counts its blocks, and published at most what it holds.
  void check_all() noexcept {
    for (auto& sh : shards_) {
      std::lock_guard lock{sh.mutex};
      GPUMEM_ASSERT(sh.blocks.size() == sh.blocks_n.load(std::memory_order_relaxed),
                    "pending_shards: a shard's count disagrees with its blocks");
      GPUMEM_ASSERT(sh.published_bytes <= sh.bytes.load(std::memory_order_relaxed) &&
                        sh.published_blocks <= sh.blocks_n.load(std::memory_order_relaxed),
                    "pending_shards: a shard published more than it holds");
    }
  }
#endif

 private:
  // The counts change only under the shard's lock, so a plain load and store do
  // (no read-modify-write: a free takes one atomic instruction, the lock's);
  // readers sum the shards without locking.
  struct alignas(64) shard {
    spin_mutex mutex;
    std::vector<Block> blocks;
    std::atomic<std::size_t> bytes{0};
    std::atomic<std::size_t> blocks_n{0};
    std::size_t published_bytes = 0;   ///< of bytes, what estimate_ counts (under mutex)
    std::size_t published_blocks = 0;  ///< of blocks_n, likewise

    void add(std::size_t n, std::size_t count) noexcept {
      bytes.store(bytes.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
      blocks_n.store(blocks_n.load(std::memory_order_relaxed) + count, std::memory_order_relaxed);
    }
  };
  /// estimate()'s totals: the sum of what the shards published.
  struct alignas(64) estimate_counts {
    std::atomic<std::size_t> bytes{0};
    std::atomic<std::size_t> blocks{0};
    std::atomic<std::size_t> peak{0};  ///< the most `bytes` has been
  };

  /// Under the shard's lock: adds what it holds beyond what it published to the
  /// estimate, once that is publish_bytes or publish_blocks.
  void publish_locked(shard& sh) noexcept {
    std::size_t const bytes = sh.bytes.load(std::memory_order_relaxed) - sh.published_bytes;
    std::size_t const blocks = sh.blocks_n.load(std::memory_order_relaxed) - sh.published_blocks;
    if (bytes < publish_bytes && blocks < publish_blocks) return;
    std::size_t const now = estimate_.bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::size_t seen = estimate_.peak.load(std::memory_order_relaxed);
    while (now > seen && !estimate_.peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {}
    estimate_.blocks.fetch_add(blocks, std::memory_order_relaxed);
    sh.published_bytes += bytes;
    sh.published_blocks += blocks;
  }
  /// Under the shard's lock, its blocks taken: its counts go to zero, and what it
  /// had published leaves the estimate.
  void take_counts_locked(shard& sh) noexcept {
    estimate_.bytes.fetch_sub(sh.published_bytes, std::memory_order_relaxed);
    estimate_.blocks.fetch_sub(sh.published_blocks, std::memory_order_relaxed);
    sh.published_bytes = 0;
    sh.published_blocks = 0;
    sh.bytes.store(0, std::memory_order_relaxed);
    sh.blocks_n.store(0, std::memory_order_relaxed);
  }

  std::array<shard, shard_count> shards_{};
  estimate_counts estimate_;
};

}  // namespace gpumem::detail
