#include <gpumem/pool_memory_resource.hpp>

#include <gpumem/call_context.hpp>
#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/driver_api.hpp>
#include "pool/coalescing_free_list.hpp"
#include "pool/stream_ordered_memory_resource.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace gpumem {
namespace {

/// Largest request any pool can accept: align_up of anything larger overflows.
constexpr std::size_t largest_request = align_down(std::numeric_limits<std::size_t>::max(), allocation_alignment);

/// A synchronous request also reclaims once this many blocks wait, whatever their
/// size: a loop of small frees then cycles through a few thousand addresses, not
/// the 32768 of 8 MiB in 256 B blocks, so the lists (and the shim's pointer table)
/// stay in cache. A barrier per 4096 frees costs the host at most 5 ns a free.
/// Counted over all threads: counting each thread's own shard instead let 16
/// threads hold up to 16 times as many blocks waiting, and made them slower through
/// the shim on an H100 (3.4 M synchronous 256 B pairs/s against 8.4 M, same job).
constexpr std::size_t reclaim_block_count = 4096;
/// Growth beyond the request: 1/64 of the pool, at most 32 MiB. Sized to the request
/// first (measured on a PyTorch MLP: 1/16 of the pool per step left 20% of the pool
/// unused at the peak, request-sized steps 3%); the small share of the pool keeps the
/// number of upstream calls down while a program ramps up.
constexpr std::size_t growth_divisor = 64;
constexpr std::size_t growth_cap = std::size_t{32} << 20;

std::size_t half_of_free_device_memory() {
  GPUMEM_CU_TRY(detail::ensure_context());
  std::size_t free = 0;
  std::size_t total = 0;
  GPUMEM_CU_TRY(detail::driver().cuMemGetInfo(&free, &total));
  return align_down(free / 2, allocation_alignment);
}

std::string mib(std::size_t bytes) { return std::to_string(bytes) + " B (" + std::to_string(bytes >> 20) + " MiB)"; }

}  // namespace

// The slabs, the free lists, growth, reclamation, release and info() come from
// stream_ordered_memory_resource; what follows is the pool's policy: where a request
// looks first, when a miss reclaims, how much the pool grows.
struct pool_memory_resource::impl : detail::stream_ordered_memory_resource<detail::coalescing_free_list> {
  using base = detail::stream_ordered_memory_resource<detail::coalescing_free_list>;

  impl(device_memory_resource* up, pool_options const& o) : base{up, "pool_memory_resource", o.device}, opts{o} {
    maximum = align_down(std::min(opts.maximum_size.value_or(largest_request), largest_request), allocation_alignment);
    if (opts.initial_size && opts.maximum_size && *opts.initial_size > *opts.maximum_size) {
      throw logic_error{"gpumem: pool initial_size (" + std::to_string(*opts.initial_size) +
                        ") is larger than maximum_size (" + std::to_string(*opts.maximum_size) + ")"};
    }
    min_growth = align_up(std::max(opts.min_growth, allocation_alignment), allocation_alignment);
  }

  void reserve_initial() {
    std::size_t const initial = opts.initial_size
                                    ? align_up(std::min(*opts.initial_size, largest_request), allocation_alignment)
                                    : std::min(half_of_free_device_memory(), maximum);
    if (initial == 0) return;
    if (initial > maximum) { throw logic_error{"gpumem: pool initial_size rounds up past maximum_size"}; }
    std::lock_guard growth{growth_mutex()};
    learn_granularity();
    std::size_t const rounded = granularity == 0 ? initial : std::min(align_up(initial, granularity), maximum);
    auto const g = grow_joined(rounded);
    if (!g) {
      throw out_of_memory{"gpumem: pool_memory_resource could not reserve its initial " + mib(initial) +
                          " from upstream"};
    }
    frontier = g.ptr + g.bytes;
    std::size_t const mine = lists_type::shard_index();
    auto& clean = lists().clean(mine);
    std::lock_guard lock{clean};
    clean.list.add({g.ptr, g.bytes, g.region});
    lists().note_clean(mine);
  }

  void* allocate(std::size_t bytes, stream_ref s) {
    if (bytes == 0) return nullptr;
    if (bytes > maximum) {
      throw out_of_memory{"gpumem: pool_memory_resource: request of " + std::to_string(bytes) +
                          " bytes exceeds the pool's maximum size of " + std::to_string(maximum) + " bytes"};
    }
    std::size_t const size = align_up(bytes, allocation_alignment);
    bool const sync = current_call().synchronous;
    if (sync) {
      // Once enough freed memory waits for a barrier, it may hold a better fit than
      // a split clean block (a training step frees and allocates the same shapes):
      // splitting meanwhile fragments the pool (measured on a PyTorch transformer
      // with varying shapes: 2.2x its live memory instead of 1.7x).
      // The estimate: one cache line, not one per shard (pending_estimate()).
      auto const pending = lists().pending_estimate();
      if (worth_reclaiming(pending.bytes, size, pending.blocks)) return reclaim_then_take(size);
      if (char* p = take_clean(size, lists_type::shards::hinted)) return p;  // the synchronous hot path
      return grow_and_take(nullptr, size);
    }
    if (char* p = take(*lists().borrow(s), size)) return p;  // the stream-ordered hot path: no refcount traffic
    auto const e = lists().get(s);                           // owned from here: growing calls the upstream
    if (char* p = adopt_clean(*e, size, /*counted_move=*/true)) return p;
    if (lists().gather_into(*e, size, gather_mode::first_fit)) {
      if (char* p = take(*e, size)) return p;
    }
    return grow_and_take(e.get(), size);
  }

  // A foreign pointer or a wrong size is a caller's bug (the shim answers both
  // before they get here): debug builds abort on it, release builds ignore it.
  void deallocate(void* ptr, std::size_t bytes, stream_ref s) noexcept {
    if (ptr == nullptr) return;
    GPUMEM_ASSERT(bytes != 0 && bytes <= largest_request, "pool: deallocate with a size the pool never hands out");
    if (bytes == 0 || bytes > largest_request) return;
    auto* p = static_cast<char*>(ptr);
    std::size_t const size = align_up(bytes, allocation_alignment);
    auto const slab = regions().find(p);
    GPUMEM_ASSERT(slab, "pool: deallocate of a pointer the pool does not hold");
    if (!slab) return;
    auto const offset = reinterpret_cast<std::uintptr_t>(p) - reinterpret_cast<std::uintptr_t>(slab.base);
    GPUMEM_ASSERT(size <= slab.size - offset, "pool: deallocate with a size that runs past the block's region");
    if (size > slab.size - offset) return;
    if (current_call().synchronous) {
      // Any stream's queued work may still use it: reusable only after a barrier.
      static_cast<void>(lists().add_pending({p, size, slab.base}, size));
      if (lists().pending_estimate().bytes >= free_reclaim_at.load(std::memory_order_relaxed)) reclaim_after_frees();
      return;
    }
    try {
      auto const e = lists().borrow(s);  // nothing below re-enters a resource
      // The stream's owner leaves it for the next holder of the lock (the hot path:
      // no lock). Others, and the owner when the slot is taken, file it now. (The
      // block is built twice, not once in a local: stored to the stack and copied
      // from there with wider loads, it cost a store-forwarding stall.)
      if (lists().owns(e) && e->defer({p, size, slab.base})) return;
      std::lock_guard lock{*e};
      // false: overlaps a free block (a double free); ignored, the pool stays consistent.
      static_cast<void>(e->list.insert({p, size, slab.base}));
    } catch (...) {
      // Out of host memory for the bookkeeping: the block is lost to the pool (never corrupts it).
    }
  }

  /// Best fit from one list; first the stream's deferred free, handed out again
  /// if it fits exactly (a program's free-then-allocate cycle), else filed.
  static char* take(entry& e, std::size_t size) {
    std::lock_guard lock{e.mutex};  // not the entry's own lock(): that would file the deferred free
    if (e.has_deferred()) {
      detail::free_block const d = e.deferred_block;
      if (d.size == size && e.list.reissue(d)) {
        e.take_deferred();
        return d.ptr;
      }
      e.settle();  // filed; a double free (it overlaps free memory) is dropped there
    }
    return e.list.take_best_fit(size).ptr;
  }

  /// A stream-ordered request takes the best-fitting clean block WHOLE into its
  /// stream's list and is served from there: the rest of the block stays next to
  /// what the stream frees, so they coalesce (clean memory needs no ordering).
  /// `counted_move`: the caller does not hold growth_mutex(), so the block, in
  /// neither list for a moment, must be counted (stream_free_lists::moves()).
  /// The thread's own clean shard first, then the others: those the hint names, or
  /// every one when the caller holds growth_mutex() (it must not miss memory
  /// before growing).
  char* adopt_clean(entry& e, std::size_t size, bool counted_move) {
    std::optional<lists_type::move_scope> moving;
    if (counted_move) moving.emplace(lists());
    auto const b = lists().take_clean(counted_move ? lists_type::shards::hinted : lists_type::shards::every,
                                      [&](detail::coalescing_free_list& l) { return l.take_whole_best_fit(size); });
    return b ? serve_whole(e, b, size) : nullptr;
  }

  /// A synchronous request's block from the clean shards: best fit in the calling
  /// thread's own, then in the others `which` names (split there: the rest stays
  /// with that shard).
  char* take_clean(std::size_t size, lists_type::shards which) {
    return lists().take_clean(which, [&](detail::coalescing_free_list& l) { return l.take_best_fit(size); }).ptr;
  }

  /// When the clean shards hold `size` bytes between them but none has a block
  /// that large: joins them in the calling thread's shard, where neighbours
  /// coalesce, and takes from there. Caller holds growth_mutex().
  char* join_clean_and_take(entry* e, std::size_t size) {
    if (lists().join_clean_into(lists_type::shard_index(), size) == 0) return nullptr;
    return take_either(e, size);
  }

  /// Files a whole clean block in the stream's list `e` and serves the request
  /// from it: the rest stays next to what the stream frees, so they coalesce.
  static char* serve_whole(entry& e, detail::free_block const& b, std::size_t size) {
    std::lock_guard lock{e};
    static_cast<void>(e.list.insert(b));
    auto const got = e.list.take_best_fit(size);
    GPUMEM_ASSERT(got, "pool: a whole clean block could not serve its request");
    return got.ptr;
  }

  /// take() from the stream's list (and then the clean list, adopted) for a
  /// stream-ordered request; from the clean list for a synchronous one (e == nullptr).
  /// Caller holds growth_mutex().
  char* take_either(entry* e, std::size_t size) {
    if (e == nullptr) return take_clean(size, lists_type::shards::every);
    if (char* p = take(*e, size)) return p;
    return adopt_clean(*e, size, /*counted_move=*/false);
  }

  /// Free memory a barrier would make clean, less the requesting stream's own list
  /// (already searched; it stays where its stream's next frees coalesce with it).
  std::size_t waiting_elsewhere(entry* e) {
    std::size_t const all = waiting_bytes(/*synchronous=*/true);
    if (e == nullptr) return all;
    std::lock_guard lock{*e};
    return all - std::min(all, e->list.free_bytes());
  }

  /// Frees that no allocation follows (a phase that ends, a model freed) would
  /// otherwise wait for a barrier, holding device memory, until the next miss:
  /// once twice the miss path's threshold waits, the freeing thread makes the
  /// barrier itself (about 1/16 of the pool, at most 1 GiB, where barriers are
  /// dear). A thread that finds the growth mutex taken leaves it to its holder.
  /// Measured on an H100 with a Llama-style decoder (PyTorch's cache off): 3.85 GiB
  /// waited for a barrier at the end of a run with 13.9 GiB live at its peak.
  GPUMEM_COLD void reclaim_after_frees() noexcept {
    std::unique_lock growth{growth_mutex(), std::try_to_lock};
    if (!growth.owns_lock()) return;
    std::size_t const bound = std::max(free_reclaim_floor, 2 * reclaim_threshold(0));
    std::size_t const waiting = lists().pending_bytes();
    bool made = false;
    if (waiting >= bound) {
      try {
        made = reclaim();
      } catch (...) {  // out of host memory for the bookkeeping: the memory waits for a miss
      }
    }
    // Refused (a stream capture is active): the frees that follow do not each try again.
    free_reclaim_at.store(made || waiting < bound ? bound : waiting + bound, std::memory_order_relaxed);
  }

  /// Whether `waiting` bytes (pending frees, and for a synchronous request the
  /// streams' lists) are worth a barrier for a request of `size`: the shared
  /// threshold, or many small blocks waiting (`blocks`: the pending block count).
  [[nodiscard]] bool worth_reclaiming(std::size_t waiting, std::size_t size, std::size_t blocks) const noexcept {
    return worth_a_barrier(waiting, size) || (waiting >= size && blocks >= reclaim_block_count);
  }

  /// A synchronous request while freed memory waits: an exact fit if the thread's
  /// clean shard has one, else reclaim first and take the best fit of everything.
  GPUMEM_COLD char* reclaim_then_take(std::size_t size) {
    auto const exact = [&](detail::coalescing_free_list& l) { return l.take_exact(size); };
    if (auto b = lists().take_clean(lists_type::shards::own, exact)) return b.ptr;
    {
      std::unique_lock<std::mutex> growth;
      if (char* p = lock_growth_or_take(growth, [&] { return take_clean(size, lists_type::shards::own); })) return p;
      // Counted exactly now: threads that saw the same estimate wait here in turn,
      // and after the first one's barrier each would make another for the few
      // blocks freed meanwhile.
      auto const pending = lists().pending();
      if (worth_reclaiming(pending.bytes, size, pending.blocks)) {
        if (char* p = reclaim_and_take(nullptr, size)) return p;
      } else if (char* p = take_either(nullptr, size)) {
        return p;
      }
    }
    return grow_and_take(nullptr, size);
  }

  /// One reclamation that serves the request from the reclaimed memory before
  /// another thread can adopt it into its stream's list: the best fit for a
  /// synchronous request (`e` == nullptr), the best-fitting block whole into the
  /// stream's list for a stream-ordered one (as adopt_clean). nullptr if no barrier
  /// could be made or nothing fits. Caller holds growth_mutex() (so the move is not
  /// counted: see stream_free_lists::moves()).
  char* reclaim_and_take(entry* e, std::size_t size) {
    detail::free_block b;
    bool reclaimed = false;
    if (e == nullptr) {
      reclaimed = reclaim([&](detail::coalescing_free_list& clean) { b = clean.take_best_fit(size); });
      if (b) return b.ptr;
    } else {
      reclaimed = reclaim([&](detail::coalescing_free_list& clean) { b = clean.take_whole_best_fit(size); });
      if (b) return serve_whole(*e, b, size);
    }
    // Other threads' frees were filed in their own clean shards: one may fit.
    return reclaimed ? take_either(e, size) : nullptr;
  }

  /// The miss path. `e`: the stream's entry for a stream-ordered request, nullptr
  /// for a synchronous one (served from the clean list only).
  GPUMEM_COLD char* grow_and_take(entry* e, std::size_t size) {
    std::unique_lock<std::mutex> growth;
    if (char* p = lock_growth_or_take(
            growth, [&] { return e != nullptr ? take(*e, size) : take_clean(size, lists_type::shards::own); })) {
      return p;
    }
    if (char* p = take_either(e, size)) return p;  // another thread grew or reclaimed meanwhile
    learn_granularity();
    // Pages this miss gives back are mapped again by it (a stitch, a growth) without
    // being freed and created anew; what is left goes back to the device at the end.
    page_moves const moves{*upstream()};

    std::size_t const pool = reserved_bytes();
    // With page release a stream-ordered miss counts what other streams' lists hold
    // too: made clean, it coalesces, and its pages can go (16 threads of
    // cudaMallocAsync on streams of their own otherwise grew a pool to 40 GiB for
    // 682 MiB live on an H100).
    std::size_t const waiting = page != 0 ? waiting_elsewhere(e) : waiting_bytes(e == nullptr);
    // With page release, what follows maps pages, and moves the memory of free pages
    // to do so: 60-90 us a page, where a barrier costs about 1 us a stream. So a page's
    // worth of waiting memory is reclaimed first: made clean it may hold the request
    // with its neighbours, or shorten what is mapped. Without this, a Llama-style
    // decoder on an H200 (32 non-blocking streams: up to 1/16 of the pool, 1 GiB at
    // most, waits between barriers) missed with its logits' last blocks waiting and moved
    // pages for 3.3 s a run in two runs of three, 0.85 s in the third; with it
    // 0.86-1.0 s in all three, and 42 MiB less at its peak. The price: a miss too big
    // to map while the GPU is behind (below) now waits for the work queued before this
    // barrier, not an older one. The GPU runs on meanwhile; the host loses its lead.
    if ((page != 0 && waiting >= page) || worth_reclaiming(waiting, size, lists().pending_blocks())) {
      if (char* p = reclaim_and_take(e, size)) return p;
    }
    if (char* p = join_clean_and_take(e, size)) return p;
    if (page != 0) {
      // No free block fits: new memory is mapped, in released addresses of the pool
      // if a range fits, else in a growth. Either way the device memory of free
      // pages that no request can use goes back first, so the pool's footprint
      // grows only when free memory is short, not because it is scattered. Memory
      // waiting for a barrier goes only after the reclaims above made it clean: a
      // barrier made here for it would make the host wait for the GPU at every miss.
      // Pages go back only once the GPU has run the work before the last barrier,
      // and waiting for that stalls the host and drains the GPU's queue, in a loop
      // whose free memory lies scattered at every step (a PyTorch MLP on an H200:
      // 10 MiB of pages moved a step, the host-bound step 1.22x slower). So while
      // the GPU is behind, the miss maps new memory and leaves the free pages for
      // later (a miss that finds the GPU done, a synchronization's release, a trim),
      // as long as what misses so hold stays within 1/32 of the pool.
      std::size_t const want = align_up(size, page);
      bool const idle = clean_is_idle(/*wait=*/held_unreleased + want > committed_bytes() / 32);
      if (char* p = stitch_and_serve(e, size, idle)) return p;
      if (idle) {
        release_pages(want);
      } else {
        held_unreleased += want;  // the growth below maps it
      }
    }

    std::size_t const preferred = std::max(min_growth, std::min(pool / growth_divisor, growth_cap));
    // Over an upstream that maps growths one after another (vmm_memory_resource), a
    // free block at the end of the last growth joins the new memory: grow by the rest.
    // That block counts toward the preferred step too, so a growth never leaves more
    // free at the frontier than a step would (measured on a PyTorch MLP's log: the
    // last growth before the peak mapped 14 MiB where 4 MiB served).
    std::size_t const tail = frontier_bytes(e, size);
    std::size_t const step = growth_step(size - tail, preferred - std::min(preferred, tail));
    // Joining that block pays only when it saves a granule. Otherwise the request
    // starts on a granule boundary of the new memory and the block stays free for
    // smaller requests (measured on a PyTorch MLP's log: 16 MiB requests joined to a
    // few KiB each straddled one granule more, and the pool peaked at 1.024x its live
    // memory instead of 1.005x).
    if (std::size_t const alone = tail != 0 ? growth_step(size, preferred) : 0; alone != 0 && alone == step) {
      if (char* p = grow_and_serve_at_start(e, alone, size)) return p;
    } else if (step != 0) {
      if (char* p = grow_and_serve(e, step, size)) return p;
    }
    std::size_t const modest = growth_step(size - tail, min_growth);
    if (modest != 0 && modest != step) {
      if (char* p = grow_and_serve(e, modest, size)) return p;
    }
    // The upstream refuses or the maximum is reached.
    if (char* p = last_looks([&] { return last_resort(e, size); })) return p;
    auto const i = info_locked();
    throw out_of_memory{"gpumem: pool_memory_resource out of memory: requested " + mib(size) + ", pool reserved " +
                        mib(i.reserved_bytes) + ", free " + mib(i.free_bytes) + ", largest free block " +
                        mib(i.largest_free_block) + ", waiting for reclamation " + mib(lists().pending_bytes()) +
                        (opts.maximum_size ? ", maximum " + mib(maximum) : std::string{", no maximum"})};
  }

  /// Everything reusable (other streams' blocks, then a reclamation), then fully
  /// free slabs back upstream and the request alone. Caller holds growth_mutex().
  char* last_resort(entry* e, std::size_t size) {
    if (e != nullptr && lists().gather_into(*e, size, gather_mode::everything)) {
      if (char* p = take(*e, size)) return p;
    }
    if (char* p = reclaim_and_take(e, size)) return p;
    if (char* p = join_clean_and_take(e, size)) return p;
    release_free_regions();
    if (char* p = take_either(e, size)) return p;
    if (page != 0) {
      bool const idle = clean_is_idle(/*wait=*/true);
      if (idle) release_pages(std::numeric_limits<std::size_t>::max());  // every free page: the maximum binds
      if (char* p = stitch_and_serve(e, size, idle)) return p;
    }
    std::size_t const tail = frontier_bytes(e, size);  // the gathering may have made it longer
    if (std::size_t const alone = growth_step(size - tail, 0); alone != 0) {
      if (char* p = grow_and_serve(e, alone, size)) return p;
    }
    // The upstream placed that growth elsewhere: the request alone, once more.
    if (std::size_t const alone = growth_step(size, 0); tail != 0 && alone != 0) return grow_and_serve(e, alone, size);
    return nullptr;
  }

  /// max(size, preferred) clamped to what the maximum still allows, in multiples of
  /// the upstream's granularity when it grows contiguously; 0 if not even `size` fits.
  [[nodiscard]] std::size_t growth_step(std::size_t size, std::size_t preferred) const noexcept {
    std::size_t const room = maximum - std::min(maximum, committed_bytes());
    if (room < size) return 0;
    std::size_t const step = std::min(align_up(std::max(size, preferred), allocation_alignment), room);
    if (granularity == 0) return step;
    std::size_t const rounded = align_up(step, granularity);  // no overflow: step <= maximum < 2^64 - 2^40
    if (rounded <= room) return rounded;
    std::size_t const lower = align_down(room, granularity);
    return lower >= size ? lower : 0;
  }

  /// Reads the upstream's granularity once, before the first growth (the device
  /// is current then). Caller holds growth_mutex().
  void learn_granularity() noexcept {
    if (granularity_known) return;
    granularity = upstream()->contiguous_granularity();
    page = opts.release_pages ? granularity : 0;
    granularity_known = true;
  }

  /// Whether clean memory may be unmapped: the last barrier's work has run on the
  /// GPU (the host waits for it if `wait`). Clean memory is ordered after all its
  /// earlier uses by a GPU-side barrier, but that work may still be queued. A yes
  /// holds while the caller keeps growth_mutex(): the clean lists gain memory only
  /// under it (growths, reclaims). Timed as page work: a wait is part of moving pages.
  bool clean_is_idle(bool wait) noexcept {
    page_timer const timed{*this};
    auto* const t = tracker();
    return t == nullptr || t->last_barrier_complete(wait);
  }

  /// Gives the device memory of whole pages inside free clean blocks back to the
  /// device (upstream()->decommit), smallest blocks first and from each block's
  /// end, until `want` bytes are released or no such page is left; the blocks'
  /// other bytes stay free. Returns the bytes released. Caller holds growth_mutex()
  /// and, in that same hold, had clean_is_idle() answer yes.
  std::size_t release_pages(std::size_t want) {
    if (page == 0 || want == 0) return 0;
    page_timer const timed{*this};
    std::size_t done = 0;
    try {
      lists().with_all_locked(
          [&](lists_type::locked_view& v) { done = release_pages_locked(clean_blocks(v), want, {}); });
    } catch (...) {
      // Out of host memory for the bookkeeping: nothing more goes.
    }
    return done;
  }

  /// A free clean block and the clean list holding it.
  struct located {
    detail::free_block block{};
    entry* in{};
  };

  /// Every block of the clean lists, inside with_all_locked(): one walk, shared by
  /// a stitch's plan and the release that precedes it.
  static std::vector<located> clean_blocks(lists_type::locked_view& v) {
    std::vector<located> out;
    for (entry* x : v.entries) {
      if (!x->clean) continue;
      x->list.for_each([&](detail::free_block const& b) { out.push_back({b, x}); });
    }
    return out;
  }

  /// release_pages() inside with_all_locked(), clean_is_idle() known, over the
  /// clean lists' blocks `blocks` (clean_blocks()); the blocks starting at the
  /// addresses in `spare` stay whole (a stitch is about to use them).
  std::size_t release_pages_locked(std::vector<located> const& blocks, std::size_t want, std::array<char*, 2> spare) {
    struct candidate {
      detail::free_block block;
      entry* from;
      char* first;  ///< its first whole page
      std::size_t bytes;
    };
    std::vector<candidate> found;
    for (auto const& [b, in] : blocks) {
      if (b.ptr == spare[0] || b.ptr == spare[1]) continue;
      auto const start = align_up(reinterpret_cast<std::uintptr_t>(b.ptr), page);
      auto const end = align_down(reinterpret_cast<std::uintptr_t>(b.end()), page);
      if (end > start) found.push_back({b, in, reinterpret_cast<char*>(start), end - start});
    }
    std::sort(found.begin(), found.end(), [](candidate const& a, candidate const& b) {
      return a.bytes != b.bytes ? a.bytes < b.bytes : a.block.ptr < b.block.ptr;
    });
    std::size_t done = 0;
    for (auto const& c : found) {
      if (done >= want) break;
      std::size_t const n = std::min(c.bytes, align_up(want - done, page));
      char* const at = c.first + (c.bytes - n);  // the block's last pages: its front stays for requests
      if (!c.from->list.remove(c.block.ptr)) continue;
      if (!upstream()->decommit(at, n)) {
        c.from->list.add(c.block);
        break;  // the upstream cannot (a fallback device): nothing more will go
      }
      try {
        note_released(at, n, c.block.slab);
      } catch (...) {
        // No host memory to record them: those addresses stay unused, nothing else.
      }
      if (at > c.block.ptr) c.from->list.add({c.block.ptr, static_cast<std::size_t>(at - c.block.ptr), c.block.slab});
      if (at + n < c.block.end()) {
        c.from->list.add({at + n, static_cast<std::size_t>(c.block.end() - (at + n)), c.block.slab});
      }
      done += n;
    }
    pages_released.fetch_add(done, std::memory_order_relaxed);
    held_unreleased -= std::min(held_unreleased, done);
    return done;
  }

  /// Serves `size` by mapping device memory again in released addresses, joined
  /// with the free clean blocks on either side of them (GMLake's stitching, by
  /// page): of the released ranges that, with their neighbours, hold the request,
  /// the one that needs the fewest pages mapped. As many pages elsewhere go back
  /// first (release_pages), so the footprint stays where it was. The joined block
  /// goes to the requester's list (clean memory needs no ordering) and serves the
  /// request. nullptr if no released range does, the maximum leaves no room or the
  /// device has no memory. `idle`: clean_is_idle(), else no page goes back and the
  /// pages mapped count in held_unreleased. Caller holds growth_mutex().
  char* stitch_and_serve(entry* e, std::size_t size, bool idle) {
    if (page == 0 || released_bytes() == 0) return nullptr;
    page_timer const timed{*this};
    char* served = nullptr;
    try {
      lists().with_all_locked([&](lists_type::locked_view& v) { served = stitch_locked(v, e, size, idle); });
    } catch (...) {
      // Out of host memory for the plan: the request grows the pool instead.
    }
    return served;
  }

  /// stitch_and_serve() inside with_all_locked(); `idle`: pages may be released.
  char* stitch_locked(lists_type::locked_view& v, entry* e, std::size_t size, bool idle) {
    std::vector<located> const blocks = clean_blocks(v);
    std::unordered_map<char*, located> by_start;
    std::unordered_map<char*, located> by_end;
    for (auto const& l : blocks) {
      by_start.emplace(l.block.ptr, l);
      by_end.emplace(l.block.end(), l);
    }
    struct plan_t {
      char* at{};           ///< the released range's start
      std::size_t range{};  ///< its bytes
      char* slab{};
      std::size_t map{};  ///< bytes to map at `at`
      located before, after;
    } best;
    for_each_released([&](char* at, std::size_t range, char* slab) {
      located before;
      if (auto it = by_end.find(at); it != by_end.end() && it->second.block.slab == slab) before = it->second;
      located after;
      if (auto it = by_start.find(at + range); it != by_start.end() && it->second.block.slab == slab) {
        after = it->second;
      }
      std::size_t const need = size - std::min(size, before.block.size);
      std::size_t map = 0;
      if (need == 0) {
        return;  // a free block that holds the request alone is no miss (another thread's reclaim)
      }
      if (need <= range) {
        map = std::min(range, align_up(need, page));
        after = {};  // the range's rest stays released between them
      } else if (need <= range + after.block.size) {
        map = range;
      } else {
        return;
      }
      if (map < best.map || best.at == nullptr) best = {at, range, slab, map, before, after};
    });
    if (best.at == nullptr) return nullptr;
    if (idle) release_pages_locked(blocks, best.map, {best.before.block.ptr, best.after.block.ptr});
    if (best.map > maximum - std::min(maximum, committed_bytes())) return nullptr;  // the maximum binds
    take_released_at(best.at, best.map);
    try {
      upstream()->commit(best.at, best.map);
    } catch (std::exception const&) {  // out of memory, or the driver failed: the range stays released
      try {
        note_released(best.at, best.map, best.slab);
      } catch (...) {
        // No host memory to record them: those addresses stay unused, nothing else.
      }
      return nullptr;
    }
    pages_recommitted.fetch_add(best.map, std::memory_order_relaxed);
    if (!idle) held_unreleased += best.map;
    char* start = best.at;
    char* end = best.at + best.map;
    for (located const* l : {&best.before, &best.after}) {
      if (l->in == nullptr) continue;
      [[maybe_unused]] bool const removed = l->in->list.remove(l->block.ptr);
      GPUMEM_ASSERT(removed, "pool: a block to stitch left its list while the lists were locked");
      start = std::min(start, l->block.ptr);
      end = std::max(end, l->block.end());
    }
    std::size_t const mine = lists_type::shard_index();
    entry& to = e != nullptr ? *e : lists().clean(mine);  // locked by with_all_locked()
    to.list.add({start, static_cast<std::size_t>(end - start), best.slab});
    char* const p = to.list.take_best_fit(size).ptr;
    if (e == nullptr) lists().note_clean(mine);
    return p;
  }

  /// trim(): reclaims what waits for a barrier, then gives device memory back until
  /// at most `keep` free bytes stay backed: whole free regions first when `keep` is
  /// 0, then free pages. Blocks the host until the barrier's work has run.
  std::size_t trim(std::size_t keep) {
    std::lock_guard growth{growth_mutex()};
    learn_granularity();
    reclaim();
    std::size_t given = 0;
    if (keep == 0) given += release_free_regions() + release_free_tails();
    std::size_t const free = info_locked().free_bytes;
    if (page != 0 && free > keep && clean_is_idle(/*wait=*/true)) given += release_pages(free - keep);
    return given;
  }

  /// The free bytes at the pool's growth frontier (the end of its last growth) in
  /// the list a request is served from (`e`, or the clean list for nullptr), when
  /// the next growth will continue it; less than `size` (else it had been served).
  /// Caller holds growth_mutex().
  std::size_t frontier_bytes(entry* e, std::size_t size) {
    if (granularity == 0 || frontier == nullptr) return 0;
    entry& from = e != nullptr ? *e : lists().clean();
    std::lock_guard lock{from};
    return std::min(from.list.bytes_ending_at(frontier), size - 1);
  }

  /// Grows by `bytes` and serves `size` from the new memory, filed first with the
  /// requester: in the stream's list for a stream-ordered request (so the stream's
  /// own frees coalesce with it; other streams still take it with an event), in the
  /// clean list for a synchronous one (`e` == nullptr). Joined to the free block at
  /// the frontier when the upstream continued the last growth, so `bytes` may be
  /// less than `size`. nullptr if the upstream is out of memory or the new memory
  /// does not serve the request (the memory then stays in the list).
  /// Caller holds growth_mutex().
  char* grow_and_serve(entry* e, std::size_t bytes, std::size_t size) {
    auto const g = grow_joined(bytes);
    if (!g) return nullptr;
    frontier = g.ptr + g.bytes;
    std::size_t const mine = lists_type::shard_index();
    entry& to = e != nullptr ? *e : lists().clean(mine);
    std::lock_guard lock{to};
    to.list.add({g.ptr, g.bytes, g.region});  // into the tree: it coalesces with the tail now
    char* const p = to.list.take_best_fit(size).ptr;
    if (e == nullptr) lists().note_clean(mine);
    return p;
  }

  /// Grows by `bytes` (at least `size`) and serves `size` from the start of the new
  /// memory, the rest filed as grow_and_serve does; the free block at the frontier
  /// stays where it is. nullptr if the upstream is out of memory.
  /// Caller holds growth_mutex().
  char* grow_and_serve_at_start(entry* e, std::size_t bytes, std::size_t size) {
    GPUMEM_ASSERT(bytes >= size, "a growth served at its start must hold the request");
    auto const g = grow_joined(bytes);
    if (!g) return nullptr;
    frontier = g.ptr + g.bytes;
    if (g.bytes > size) {
      std::size_t const mine = lists_type::shard_index();
      entry& to = e != nullptr ? *e : lists().clean(mine);
      std::lock_guard lock{to};
      to.list.add({g.ptr + size, g.bytes - size, g.region});
      if (e == nullptr) lists().note_clean(mine);
    }
    return g.ptr;
  }

  // Lock order: growth_mutex() first (stream_ordered_memory_resource.hpp). allocate
  // and deallocate take it only to grow or reclaim.
  pool_options const opts;
  std::size_t maximum{};     ///< opts.maximum_size rounded down to 256, or the largest request
  std::size_t min_growth{};  ///< opts.min_growth rounded up to 256
  // Contiguous growth (guarded by growth_mutex()): the upstream's granularity, read
  // at the first growth (0: the upstream does not grow contiguously), and the end of
  // the last growth, where the next one continues if the upstream can place it there.
  std::size_t granularity{};
  bool granularity_known = false;
  char* frontier{};
  /// Bytes misses mapped while free pages stayed, the GPU being behind (grow_and_take);
  /// pages given back count it down. Guarded by growth_mutex().
  std::size_t held_unreleased = 0;
  /// Page release (guarded by growth_mutex()): the upstream's page size when it can
  /// give the memory of free pages back (vmm_memory_resource) and the options allow
  /// it; 0 otherwise.
  std::size_t page{};
  /// reclaim_after_frees(): the least waiting memory it makes a barrier for, and the
  /// pending estimate at which a synchronous free calls it (its bound when it last
  /// looked; written by it alone, read by every synchronous free).
  static constexpr std::size_t free_reclaim_floor = std::size_t{16} << 20;
  std::atomic<std::size_t> free_reclaim_at{free_reclaim_floor};
  // What page release did and cost (written under growth_mutex(), read by info()).
  std::atomic<std::size_t> pages_released{0};
  std::atomic<std::size_t> pages_recommitted{0};
  std::atomic<std::uint64_t> page_ns{0};
  /// Scope of device_memory_resource::begin_page_moves() on the upstream.
  class page_moves {
   public:
    explicit page_moves(device_memory_resource& upstream) noexcept : up_{upstream} { up_.begin_page_moves(); }
    ~page_moves() { up_.end_page_moves(); }
    page_moves(page_moves const&) = delete;
    page_moves& operator=(page_moves const&) = delete;

   private:
    device_memory_resource& up_;
  };
  /// Adds the time of a release or commit to page_ns.
  class page_timer {
   public:
    explicit page_timer(impl& p) noexcept : p_{p}, start_{std::chrono::steady_clock::now()} {}
    ~page_timer() {
      auto const ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_);
      p_.page_ns.fetch_add(static_cast<std::uint64_t>(ns.count()), std::memory_order_relaxed);
    }
    page_timer(page_timer const&) = delete;
    page_timer& operator=(page_timer const&) = delete;

   private:
    impl& p_;
    std::chrono::steady_clock::time_point start_;
  };
};

pool_memory_resource::pool_memory_resource(device_memory_resource* upstream, pool_options opts)
    : impl_{std::make_unique<impl>(upstream, opts)} {
  impl_->reserve_initial();
}

pool_memory_resource::~pool_memory_resource() = default;

device_memory_resource* pool_memory_resource::upstream() const noexcept { return impl_->upstream(); }
std::size_t pool_memory_resource::pool_size() const noexcept { return impl_->committed_bytes(); }
std::size_t pool_memory_resource::address_bytes() const noexcept { return impl_->reserved_bytes(); }
std::size_t pool_memory_resource::trim(std::size_t keep) { return impl_->trim(keep); }
std::size_t pool_memory_resource::pending_bytes() const noexcept { return impl_->lists().pending_bytes(); }
std::size_t pool_memory_resource::reclaim_count() const noexcept { return impl_->reclaim_count(); }
pool_options const& pool_memory_resource::options() const noexcept { return impl_->opts; }

void* pool_memory_resource::do_allocate(std::size_t bytes, stream_ref stream) { return impl_->allocate(bytes, stream); }
void pool_memory_resource::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  impl_->deallocate(p, bytes, stream);
}
std::size_t pool_memory_resource::do_release() { return impl_->trim(0); }
std::size_t pool_memory_resource::do_trim(std::size_t keep) { return impl_->trim(keep); }
resource_info pool_memory_resource::do_info() const {
  resource_info i = impl_->info();
  i.pages_released_total = impl_->pages_released.load(std::memory_order_relaxed);
  i.pages_recommitted_total = impl_->pages_recommitted.load(std::memory_order_relaxed);
  i.page_work_ns = impl_->page_ns.load(std::memory_order_relaxed);
  return i;
}
bool pool_memory_resource::do_owns(void const* p) const noexcept { return impl_->owns(p); }
void pool_memory_resource::do_stream_destroyed(stream_ref stream) noexcept { impl_->stream_destroyed(stream); }

}  // namespace gpumem
