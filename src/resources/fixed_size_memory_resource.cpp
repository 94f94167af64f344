#include <gpumem/fixed_size_memory_resource.hpp>

#include <gpumem/call_context.hpp>
#include <gpumem/detail/assert.hpp>
#include "pool/stream_ordered_memory_resource.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t cache_line = 64;

/// One upstream allocation cut into equal blocks, with one atomic in-use flag per
/// block: it turns double frees and stray pointers into no-ops instead of handing
/// one block out twice. Every allocate and deallocate writes its block's flag, and
/// threads on different streams usually hold neighbouring blocks (a fresh chunk
/// hands out ascending addresses), so neighbours' flags lie on different cache
/// lines: block i's flag is on line i % lines (up to 64 lines, 4 KiB of host memory
/// per chunk). A packed bitmap (64 blocks a word) put the flags of 16 threads'
/// blocks in one cache line, which every pair of every thread wrote.
struct chunk {
  chunk(char* b, std::size_t n, std::size_t bsize)
      : base{b}, blocks{n}, block_size{bsize}, block_shift_{shift_of(bsize)}, line_shift_{line_shift_of(n)} {
    std::size_t const lines = std::size_t{1} << line_shift_;
    stride_ = align_up((n + lines - 1) >> line_shift_, cache_line);
    flags_ = std::make_unique<flag_line[]>(lines * stride_ / cache_line);
    for (std::size_t i = 0; i < n; ++i) flag(i).store(free_flag, std::memory_order_relaxed);
  }
  [[nodiscard]] std::size_t bytes() const noexcept { return blocks * block_size; }
  /// The block holding the byte at `offset` into the chunk.
  [[nodiscard]] std::size_t index_of(std::size_t offset) const noexcept {
    return block_shift_ != 0 ? offset >> block_shift_ : offset / block_size;
  }
  [[nodiscard]] bool at_block_start(std::size_t offset) const noexcept {
    return block_shift_ != 0 ? (offset & (block_size - 1)) == 0 : offset % block_size == 0;
  }
  /// Marks block i handed out. Only the thread that took it out of a free list
  /// (under that list's lock) does this, so a plain store suffices.
  void mark_used(std::size_t i) noexcept {
    GPUMEM_ASSERT(flag(i).load(std::memory_order_relaxed) == free_flag, "fixed_size: a free-listed block was in use");
    flag(i).store(used_flag, std::memory_order_release);
  }
  /// Marks block i free; false if it already was (a double free). Frees of one block
  /// may race (a program's double free on two threads): the exchange lets one win.
  bool mark_free(std::size_t i) noexcept { return flag(i).exchange(free_flag, std::memory_order_acq_rel) == used_flag; }

  char* const base;
  std::size_t const blocks;
  std::size_t const block_size;

 private:
  static constexpr std::uint8_t used_flag = 0;
  static constexpr std::uint8_t free_flag = 1;
  static constexpr unsigned max_line_shift = 6;  ///< at most 64 lines per chunk
  struct alignas(cache_line) flag_line {
    std::atomic<std::uint8_t> flag[cache_line];
  };
  static_assert(sizeof(flag_line) == cache_line && std::atomic<std::uint8_t>::is_always_lock_free);

  /// log2 of a power-of-two block size (divisions become shifts); 0 otherwise.
  static unsigned shift_of(std::size_t bsize) noexcept {
    return std::has_single_bit(bsize) ? static_cast<unsigned>(std::countr_zero(bsize)) : 0;
  }
  /// log2 of the number of flag lines: one per block for up to 64 blocks.
  static unsigned line_shift_of(std::size_t n) noexcept {
    return std::min(static_cast<unsigned>(std::bit_width(n - 1)), max_line_shift);
  }
  std::atomic<std::uint8_t>& flag(std::size_t i) noexcept {
    std::size_t const at = (i & ((std::size_t{1} << line_shift_) - 1)) * stride_ + (i >> line_shift_);
    return flags_[at / cache_line].flag[at % cache_line];
  }

  unsigned const block_shift_;
  unsigned const line_shift_;
  std::size_t stride_{};  ///< bytes of flags per line (a multiple of the cache line)
  std::unique_ptr<flag_line[]> flags_;
};

struct block_ref {
  char* ptr;
  chunk* owner;
};

/// Gives each free stack's storage whole cache lines: every allocate and
/// deallocate writes its stream's stack, and stacks of different streams (threads)
/// must not share a line.
template <class T>
struct cache_line_allocator {
  using value_type = T;
  cache_line_allocator() = default;
  template <class U>
  explicit cache_line_allocator(cache_line_allocator<U> const& /*other*/) noexcept {}
  static std::size_t bytes_for(std::size_t n) noexcept { return align_up(n * sizeof(T), cache_line); }
  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T) - cache_line) throw std::bad_array_new_length{};
    return static_cast<T*>(::operator new (bytes_for(n), std::align_val_t{cache_line}));
  }
  void deallocate(T* p, std::size_t n) noexcept { ::operator delete (p, bytes_for(n), std::align_val_t{cache_line}); }
  friend bool operator==(cache_line_allocator const&, cache_line_allocator const&) noexcept { return true; }
};

/// One stream's free blocks: a LIFO stack (the most recently freed block is the
/// most likely to be warm in cache and already ordered). O(1) push/pop.
class block_stack {
 public:
  using block_type = block_ref;

  void push(block_ref b) { blocks_.push_back(b); }
  void add(block_ref b) { push(b); }
  void add_all(std::vector<block_ref> const& blocks) { blocks_.insert(blocks_.end(), blocks.begin(), blocks.end()); }
  /// Makes room for n more pushes, so that they cannot throw.
  void reserve_extra(std::size_t n) { blocks_.reserve(blocks_.size() + n); }
  std::optional<block_ref> pop() noexcept {
    if (blocks_.empty()) return std::nullopt;
    auto const b = blocks_.back();
    blocks_.pop_back();
    return b;
  }
  /// More than the block freed last: what another stream may take without leaving
  /// this one empty (stream_free_lists::gather_spares_into).
  [[nodiscard]] bool has_spare() const noexcept { return blocks_.size() > 1; }
  /// Moves every block but the one freed last to `out`; on failure (host memory)
  /// nothing moves.
  void move_spares_to(block_stack& out) {
    if (!has_spare()) return;
    out.blocks_.insert(out.blocks_.end(), blocks_.begin(), blocks_.end() - 1);
    blocks_.erase(blocks_.begin(), blocks_.end() - 1);
  }
  void merge_from(block_stack&& other) {
    if (other.blocks_.size() > blocks_.size()) std::swap(blocks_, other.blocks_);
    blocks_.insert(blocks_.end(), other.blocks_.begin(), other.blocks_.end());
    other.blocks_.clear();
  }
  [[nodiscard]] bool can_serve(std::size_t /*bytes*/) const noexcept { return !blocks_.empty(); }
  [[nodiscard]] bool empty() const noexcept { return blocks_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return blocks_.size(); }
  [[nodiscard]] std::size_t free_bytes() const noexcept {
    return blocks_.empty() ? 0 : blocks_.size() * blocks_.front().owner->block_size;
  }
  [[nodiscard]] std::size_t largest() const noexcept { return blocks_.empty() ? 0 : blocks_.front().owner->block_size; }
  template <class F>
  void for_each_piece(F&& f) const {
    for (auto const& b : blocks_) f(b.owner->base, b.owner->block_size);
  }
  template <class Regions>
  void remove_regions(Regions const& sorted) {
    std::erase_if(blocks_, [&](block_ref const& b) {
      auto it = std::lower_bound(sorted.begin(), sorted.end(), b.owner->base,
                                 [](auto const& r, char* base) { return r.base < base; });
      return it != sorted.end() && it->base == b.owner->base;
    });
  }

 private:
  std::vector<block_ref, cache_line_allocator<block_ref>> blocks_;
};

}  // namespace

// The chunks, the free lists, growth, reclamation, release and info() come from
// stream_ordered_memory_resource (each chunk's block bits are its region's payload);
// what follows is fixed_size's policy.
struct fixed_size_memory_resource::impl : detail::stream_ordered_memory_resource<block_stack, chunk> {
  using base = detail::stream_ordered_memory_resource<block_stack, chunk>;

  impl(device_memory_resource* up, std::size_t bsize, std::size_t per_chunk)
      : base{up, "fixed_size_memory_resource"},
        block_size{align_up(bsize, allocation_alignment)},
        blocks_per_chunk{per_chunk} {
    if (bsize == 0 || bsize > std::numeric_limits<std::size_t>::max() / 2) {
      throw logic_error{"gpumem: fixed_size_memory_resource block size must be > 0 (got " + std::to_string(bsize) +
                        ")"};
    }
    if (per_chunk == 0 || per_chunk > std::numeric_limits<std::size_t>::max() / block_size) {
      throw logic_error{"gpumem: fixed_size_memory_resource blocks_to_preallocate must be > 0 and fit in memory (got " +
                        std::to_string(per_chunk) + ")"};
    }
  }

  void preallocate() {
    std::lock_guard growth{growth_mutex()};
    if (!add_chunk(blocks_per_chunk)) {
      throw out_of_memory{"gpumem: fixed_size_memory_resource could not preallocate " +
                          std::to_string(blocks_per_chunk) + " blocks of " + std::to_string(block_size) + " bytes"};
    }
  }

  void* allocate(std::size_t bytes, stream_ref s) {
    if (bytes == 0) return nullptr;
    if (bytes > block_size) {
      throw bad_alloc{CUDA_ERROR_INVALID_VALUE, "gpumem: fixed_size_memory_resource: request of " +
                                                    std::to_string(bytes) + " bytes is larger than the block size " +
                                                    std::to_string(block_size)};
    }
    bool const sync = current_call().synchronous;
    // Hot paths: a stream reuses its own frees; anything may use clean blocks.
    if (!sync) {
      if (char* p = take(*lists().borrow(s))) return p;
    }
    if (char* p = take_clean(lists_type::shards::hinted)) return p;
    if (sync) return miss(nullptr);
    auto const e = lists().get(s);  // owned from here: growing calls the upstream
    if (lists().gather_spares_into(*e, block_size)) {
      if (char* p = take(*e)) return p;
    }
    return miss(e.get());
  }

  /// The miss path: spare blocks of other streams (ordered by events), memory
  /// waiting for reclamation, a new chunk, and only when the upstream refuses, the
  /// last free block of every other stream. A stream's last free block is the one
  /// its thread will most likely ask for next: taking it sends that thread to take
  /// a third stream's, and so on, each take an event record and a wait, and a
  /// thread finding every list empty meanwhile grows. Never out of memory while
  /// some stream holds a free block that can be ordered or reclaimed. `e`: the
  /// stream's entry, nullptr for a synchronous request (clean blocks only).
  GPUMEM_COLD char* miss(entry* e) {
    std::unique_lock<std::mutex> growth;
    if (char* p = lock_growth_or_take(growth,
                                      [&] { return e != nullptr ? take(*e) : take_clean(lists_type::shards::own); }))
      return p;
    auto const retry = [&]() -> char* {
      if (e != nullptr) {
        if (char* p = take(*e)) return p;
      }
      return take_clean(lists_type::shards::every);
    };
    if (char* p = retry()) return p;  // another thread grew or reclaimed meanwhile
    if (e != nullptr && lists().gather_spares_into(*e, block_size)) {
      if (char* p = retry()) return p;
    }
    if (worth_a_barrier(waiting_bytes(e == nullptr), block_size, miss_reclaim_floor()) && reclaim()) {
      if (char* p = retry()) return p;
    }
    // A whole chunk, else a single block. Threads on the same stream take from the
    // lists without the growth lock, so they may empty a chunk before this thread
    // gets a block from it: grow again until this thread has one or the upstream
    // refuses.
    for (;;) {
      if (!add_chunk(blocks_per_chunk) && !(blocks_per_chunk > 1 && add_chunk(1))) break;
      if (char* p = retry()) return p;
    }
    // The upstream refuses: every block other streams hold, their last ones
    // included, then a reclamation whose first block goes to this request.
    char* const p = last_looks([&]() -> char* {
      if (e != nullptr && lists().gather_into(*e, block_size, gather_mode::everything)) {
        if (char* q = retry()) return q;
      }
      std::optional<block_ref> b;
      if (reclaim([&](block_stack& clean) { b = clean.pop(); }) && b) return hand_out(*b);
      return retry();
    });
    if (p != nullptr) return p;
    throw out_of_memory{"gpumem: fixed_size_memory_resource out of memory: upstream cannot give one more block of " +
                        std::to_string(block_size) + " bytes (holding " + std::to_string(reserved_bytes()) +
                        " bytes, " + std::to_string(lists().pending_bytes()) + " waiting for reclamation)"};
  }

  // A foreign pointer or a wrong size is a caller's bug: debug builds abort on it,
  // release builds ignore it. (A double free is ignored in both.)
  void deallocate(void* ptr, std::size_t bytes, stream_ref s) noexcept {
    if (ptr == nullptr) return;
    GPUMEM_ASSERT(bytes != 0 && bytes <= block_size, "fixed_size: deallocate with a size of 0 or over the block size");
    if (bytes == 0 || bytes > block_size) return;
    auto* p = static_cast<char*>(ptr);
    auto const found = regions().find(p);
    GPUMEM_ASSERT(found, "fixed_size: deallocate of a pointer the resource does not hold");
    if (!found) return;
    chunk* const c = found.payload;
    auto const offset = reinterpret_cast<std::uintptr_t>(p) - reinterpret_cast<std::uintptr_t>(c->base);
    GPUMEM_ASSERT(offset < c->bytes() && c->at_block_start(offset),
                  "fixed_size: deallocate of a pointer inside a block");
    if (offset >= c->bytes() || !c->at_block_start(offset)) return;
    if (!c->mark_free(c->index_of(offset))) return;  // double free: ignored
    if (current_call().synchronous) {
      // Any stream's queued work may still use it: reusable only after a barrier.
      static_cast<void>(lists().add_pending({p, c}, block_size));
      return;
    }
    try {
      auto const e = lists().borrow(s);  // nothing below re-enters a resource
      std::lock_guard lock{e->mutex};
      e->list.push({p, c});
    } catch (...) {
      // Out of host memory for the bookkeeping: the block is lost (never handed out twice).
    }
  }

  /// Pops a block from the stream's own stack.
  static char* take(entry& e) {
    std::optional<block_ref> b;
    {
      std::lock_guard lock{e.mutex};
      b = e.list.pop();
    }
    return b ? hand_out(*b) : nullptr;
  }

  /// A block leaving the free lists for the program: marked used in its chunk.
  static char* hand_out(block_ref const& b) noexcept {
    b.owner->mark_used(b.owner->index_of(static_cast<std::size_t>(b.ptr - b.owner->base)));
    return b.ptr;
  }

  /// A block from the clean shards: the calling thread's own, then the others `which` names.
  char* take_clean(lists_type::shards which) {
    auto const b = lists().take_clean(which, [](block_stack& l) { return l.pop(); });
    return b ? hand_out(*b) : nullptr;
  }

  /// A chunk of n blocks from the upstream, filed as clean blocks (grown with
  /// synchronous semantics on the legacy stream: usable at once by any stream);
  /// false if the upstream is out of memory. Caller holds growth_mutex.
  bool add_chunk(std::size_t n) {
    std::size_t const bytes = n * block_size;
    auto const grown = grow(bytes, [&](char* start) { return chunk{start, n, block_size}; });
    if (!grown) return false;
    try {
      std::size_t const mine = lists_type::shard_index();
      entry& e = lists().clean(mine);
      std::lock_guard lock{e.mutex};
      e.list.reserve_extra(n);  // the only step that can throw: nothing is filed yet
      // Pushed high to low so that pops hand out ascending addresses.
      for (std::size_t i = n; i-- > 0;) e.list.push({grown.base + i * block_size, grown.payload});
      lists().note_clean(mine);
    } catch (...) {
      undo_growth(grown.base);
      throw;
    }
    return true;
  }

  std::size_t const block_size;
  std::size_t const blocks_per_chunk;

  /// The floor of the memory waiting for reclamation worth a barrier on a miss (else
  /// the miss grows; the shared rule, stream_ordered_memory_resource::reclaim_threshold).
  /// The pool's is 8 MiB; here it is one chunk if that is less:
  /// growing a chunk is what the miss does instead, and the waiting blocks serve
  /// only this block size, so with the pool's floor every bin of a binning resource
  /// could hold 8 MiB waiting. A barrier still reclaims at least a chunk's worth (or
  /// 8 MiB; where barriers are cheap, without non-blocking streams, 2 MiB if that is
  /// less).
  [[nodiscard]] std::size_t miss_reclaim_floor() const noexcept {
    return std::min(blocks_per_chunk * block_size, reclaim_floor);
  }
};

fixed_size_memory_resource::fixed_size_memory_resource(device_memory_resource* upstream, std::size_t block_size,
                                                       std::size_t blocks_to_preallocate)
    : impl_{std::make_unique<impl>(upstream, block_size, blocks_to_preallocate)} {
  impl_->preallocate();
}

fixed_size_memory_resource::~fixed_size_memory_resource() = default;

device_memory_resource* fixed_size_memory_resource::upstream() const noexcept { return impl_->upstream(); }
std::size_t fixed_size_memory_resource::block_size() const noexcept { return impl_->block_size; }
std::size_t fixed_size_memory_resource::blocks_per_chunk() const noexcept { return impl_->blocks_per_chunk; }

void* fixed_size_memory_resource::do_allocate(std::size_t bytes, stream_ref stream) {
  return impl_->allocate(bytes, stream);
}
void fixed_size_memory_resource::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  impl_->deallocate(p, bytes, stream);
}
std::size_t fixed_size_memory_resource::do_release() { return impl_->release(); }
resource_info fixed_size_memory_resource::do_info() const { return impl_->info(); }
bool fixed_size_memory_resource::do_owns(void const* p) const noexcept { return impl_->owns(p); }
void fixed_size_memory_resource::do_stream_destroyed(stream_ref stream) noexcept { impl_->stream_destroyed(stream); }

}  // namespace gpumem
