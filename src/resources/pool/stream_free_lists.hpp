#pragma once
// stream_free_lists<List>: the free memory of a stream-ordered caching resource
// (pool_memory_resource, fixed_size_memory_resource) and the rules for moving it
// between streams and between the two allocation families without blocking the host.
//
// Where free memory lives:
// - One entry per stream: blocks freed in stream order on that stream (cudaFreeAsync
//   semantics). The stream reuses them at once; another stream takes them only after
//   waiting on an event recorded on the first (gather_into).
// - The CLEAN lists: memory no queued GPU work can still touch — fresh upstream
//   memory, and everything reclaimed by a barrier. Any allocation may take from
//   them at once: a synchronous one (cudaMalloc semantics: usable on any stream
//   immediately) and a stream-ordered one on any stream.
// - PENDING: blocks freed with synchronous semantics (cudaFree: "all work submitted
//   before the free, on any stream, counts as finished"). No stream order protects
//   them, so they are never handed out until reclaim() has made a device-wide GPU
//   barrier (stream_tracker::barrier()) after they were freed.
// - Foreign batches: the list of a destroyed stream, guarded by an event recorded
//   on it at destruction.
// Clean and pending memory are split into shards, one per thread
// (sharded_lists.hpp); a stream's entry and the deferred free its owning thread
// may leave in it without the lock are in stream_entry.hpp.
//
// reclaim(): takes every stream's list, every foreign batch and the pending blocks,
// makes one barrier (ordering all later work on every stream after all work
// submitted so far, host never blocked), then moves it all into the clean list.
// Lists freed while the barrier is being made stay where they are, for the next one.
// If no barrier can be made (a capture is active, no driver), everything goes back
// and reclaim() returns false: the owner grows instead.
//
// Moving memory between streams (gather_into(taker)) is unchanged from RMM's
// design: a destroyed stream's batch waits on the event recorded at destruction
// (or not at all once it completed); a live stream's event is recorded at that
// moment and the taker waits on it. The wait covers the victim's whole list, so all
// of it moves, except between two streams taking from each other in turn (the
// victim's last take was from the taker): then a list that can be cut
// (List::share_into) and is one free block keeps the front of it, so the two settle
// instead of trading the whole list back and forth, an event and a wait per
// allocation. A capturing stream is never recorded on or made to wait. The
// per-thread default stream has one entry per thread; another thread cannot name
// it, so it orders after it through the legacy stream
// (stream_identity::record_handle()).
//
// Locking (lock order, outermost first): the owner's growth mutex (held by
// reclaim() callers) -> table_mutex_ (shared for lookups and gathers, exclusive to
// add/drop a stream) -> entry mutexes (several only in with_all_locked() and
// join_clean_into(): the clean shards first, in index order, then the streams' in
// ascending key order) ->
// foreign_mutex_ -> pending shard mutexes; reclaim() asks the stream tracker (its
// own mutex) while it holds one entry mutex. allocate/deallocate hold at most one
// entry or shard mutex at a time. Entry and shard locks are spin_mutex: taken on
// every allocate and free, almost never contended.
//
// Invariants, checked in debug builds (GPUMEM_ASSERT): each pending shard's count
// is its number of blocks, and what it published is at most that (checked as
// each reclaim() starts); reclaims never overlap; an entry obtained with borrow() is not used after this thread's next
// lookup or upstream call (borrowed_entry).

#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/spin_mutex.hpp>
#include <gpumem/detail/stream_ordering.hpp>
#include <gpumem/stream_tracker.hpp>

#include "sharded_lists.hpp"
#include "stream_entry.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpumem::detail {

/// An upstream allocation whose every byte is free, and the stream on which it
/// may be given back (ordered after every stream that freed part of it).
struct free_region {
  char* base{};
  std::size_t size{};
  CUstream stream{};
  friend bool operator<(free_region const& a, free_region const& b) noexcept { return a.base < b.base; }
};

/// What a free list must offer stream_free_lists and stream_ordered_memory_resource.
/// A "region" is one upstream allocation (a pool slab, a fixed_size chunk);
/// for_each_piece(f) calls f(region_base, bytes) for each free piece,
/// remove_regions(sorted vector<free_region>) drops every piece inside those regions.
template <class List>
concept stream_free_list = std::default_initializable<List> && std::movable<List> &&
    requires(List& l, List const& cl, typename List::block_type b, std::size_t n) {
  l.add(b);                                             // a freed block; overlapping ones are dropped
  l.add_all(std::vector<typename List::block_type>{});  // a reclaimed batch, the same way
  l.merge_from(std::move(l));                           // leaves the source empty
  { cl.can_serve(n) } -> std::convertible_to<bool>;
  { cl.empty() } -> std::convertible_to<bool>;
  { cl.free_bytes() } -> std::convertible_to<std::size_t>;
  { cl.largest() } -> std::convertible_to<std::size_t>;  // the largest request it can serve
  cl.for_each_piece([](char*, std::size_t) {});
  l.remove_regions(std::vector<free_region>{});
};

template <stream_free_list List>
class stream_free_lists {
 public:
  using block_type = typename List::block_type;

  using entry = stream_entry<List>;
  using entry_ptr = std::shared_ptr<entry>;

  struct foreign_batch {
    CUevent event{};  ///< recorded on the destroyed stream after its last free
    List list;
  };

  /// What with_all_locked() hands its callback: everything but pending, locked.
  struct locked_view {
    std::vector<entry*> entries;  ///< the clean shards first, then the streams' in ascending key
    std::vector<foreign_batch>& foreign;
    List& quarantine;
  };

  enum class gather_mode {
    first_fit,  ///< stop at the first source that can serve `bytes`
    everything  ///< take all that can be ordered (before growing fails for good); only
                ///< for a caller holding the owner's growth mutex: not a counted move
                ///< (moves()), since only such a caller makes the last look
  };

  stream_free_lists() = default;
  stream_free_lists(stream_free_lists const&) = delete;
  stream_free_lists& operator=(stream_free_lists const&) = delete;
  ~stream_free_lists() {
    for (auto& [key, e] : table_) destroy_event(e->event);
    for (auto& b : foreign_) destroy_event(b.event);
  }

  /// The entry of `s`, created on first use. The calling thread's last lookups
  /// are cached: the hot path touches no shared cache line but generation_,
  /// which changes only when a stream is dropped.
  [[nodiscard]] entry_ptr get(stream_ref s) { return lookup(s).e; }

  /// The entry of `s` without a reference count of the caller's own: the calling
  /// thread's lookup hint keeps it alive until this thread's next get() or
  /// borrow() on any stream_free_lists (hints of instances share slots). So the
  /// caller may lock and use it, but must take a get() before anything that can
  /// re-enter a resource (an upstream call). Saves two atomic read-modify-writes.
  [[nodiscard]] borrowed_entry<entry> borrow(stream_ref s) {
    entry& e = *lookup(s).e;
    return borrowed_entry<entry>{e};
  }

  /// Whether the calling thread may defer() frees into `e`, borrowed from this
  /// object just before (no lookup since): it owns it, or claims it now because
  /// no thread does (none has freed there yet, or the owner exited).
  [[nodiscard]] bool owns(borrowed_entry<entry> const& e) noexcept {
    std::uint64_t const owner = e->owner.load(std::memory_order_relaxed);
    if (owner == tl_owner_tag) return true;  // only this thread stores its own tag
    return owner == 0 && claim(*e);
  }

  /// Shards of clean and pending memory (sharded_lists.hpp).
  static constexpr std::size_t shard_count = detail::shard_count;
  [[nodiscard]] static std::size_t shard_index() noexcept { return detail::shard_index(); }
  /// The calling thread's clean shard (lives as long as this object).
  [[nodiscard]] entry& clean() noexcept { return clean_[shard_index()]; }
  /// Clean shard `i` (< shard_count).
  [[nodiscard]] entry& clean(std::size_t i) noexcept { return clean_[i]; }
  /// Which clean shards may hold memory (clean_shards::hint()).
  [[nodiscard]] std::uint32_t clean_hint() const noexcept { return clean_.hint(); }
  /// Under shard i's lock, after filing memory there or taking some.
  void note_clean(std::size_t i) noexcept { clean_.note(i); }
  using shards = shard_choice;
  /// clean_shards::take(): the calling thread's clean shard, then those `which` names.
  template <class Take>
  auto take_clean(shards which, Take&& take) -> decltype(take(std::declval<List&>())) {
    return clean_.take(which, std::forward<Take>(take));
  }
  /// clean_shards::join_into(). The caller holds the owner's growth mutex (so the
  /// move is not counted: see moves()).
  std::size_t join_clean_into(std::size_t into, std::size_t needed) { return clean_.join_into(into, needed); }

  /// Files a block freed with synchronous semantics (pending_shards::add()).
  bool add_pending(block_type b, std::size_t bytes) noexcept { return pending_.add(b, bytes); }
  /// Bytes freed with synchronous semantics and not yet reclaimed (a reclaim's
  /// batch leaves the count as it is taken, while the growth mutex is held), and
  /// how many blocks those are: one pass over the shards (a synchronous
  /// allocation asks for both).
  using pending_totals = typename pending_shards<block_type>::totals;
  [[nodiscard]] pending_totals pending() const noexcept { return pending_.exact(); }
  [[nodiscard]] std::size_t pending_bytes() const noexcept { return pending().bytes; }
  [[nodiscard]] std::size_t pending_blocks() const noexcept { return pending().blocks; }
  /// pending() for a hot path (pending_shards::estimate()).
  [[nodiscard]] pending_totals pending_estimate() const noexcept { return pending_.estimate(); }
  /// The peak of memory waiting for a barrier (pending_shards::peak_estimate()).
  [[nodiscard]] std::size_t peak_pending_estimate() const noexcept { return pending_.peak_estimate(); }
  static constexpr std::size_t publish_bytes = pending_shards<block_type>::publish_bytes;
  static constexpr std::size_t publish_blocks = pending_shards<block_type>::publish_blocks;

  /// Bytes free in stream lists and foreign batches: memory a stream-ordered
  /// allocation could reach with events, and a synchronous one only by reclaim().
  /// Walks every entry: for miss paths only.
  [[nodiscard]] std::size_t stream_bytes() {
    std::size_t total = 0;
    {
      std::shared_lock lock{table_mutex_};
      for (auto const& [key, e] : table_) {
        std::lock_guard elock{*e};
        total += e->list.free_bytes();
      }
    }
    std::lock_guard flock{foreign_mutex_};
    for (auto const& b : foreign_) total += b.list.free_bytes();
    return total;
  }

  /// The reclamation described in the file comment. The caller holds its growth
  /// mutex (reclaims never run concurrently) and no entry mutex. Returns whether a
  /// barrier was made (then everything freed before the call is in the clean list).
  /// `on_clean(List& clean)` runs with the clean list still locked once everything
  /// is in it: a caller that reclaims for a request takes its block there, before
  /// any other thread can adopt the reclaimed memory into its stream's list.
  template <class OnClean>
  bool reclaim(stream_tracker& tracker, OnClean&& on_clean) {
    [[maybe_unused]] reclaim_scope const scope{*this};
    if (stream_tracker::capture_active()) return false;  // the barrier would refuse
    // The working vectors are kept from one reclaim to the next (reclaims never
    // overlap): a reclaim allocates no host memory once they have grown.
    auto& pending = scratch_.pending;  // one vector per shard
    auto& entries = scratch_.entries;
    auto& lists = scratch_.lists;
    scratch_clearer const clear_at_exit{scratch_};
    // 1. Take everything that may have been touched by work submitted so far.
    // A shard or the foreign batches read as empty without their lock are skipped:
    // whatever was filed there before this call in any order the program can
    // observe (its free returned, then the program asked for memory) is seen by
    // these loads; anything later waits for the next reclaim, as it would anyway.
    bool any_pending = false;
    for (std::size_t i = 0; i < shard_count; ++i) {
      if (pending_.take(i, pending[i], scratch_.pending_bytes[i])) any_pending = true;
    }
    {
      std::shared_lock lock{table_mutex_};
      entries.reserve(table_.size());
      for (auto const& [key, e] : table_) entries.push_back(e);
    }
    lists.reserve(entries.size());
    for (auto const& e : entries) {
      // covers() under the entry's lock: a thread destroying the stream takes this
      // lock (stream_destroyed) before the driver destroys it, so the driver may be
      // asked about the stream here only while it still exists.
      std::lock_guard elock{*e};
      if (e->list.empty()) continue;
      // A non-blocking stream the tracker does not know is not ordered by the
      // barrier: its blocks stay in stream order.
      if (!tracker.covers(e->id.handle)) continue;
      lists.emplace_back(e, std::move(e->list));
      e->list = List{};
    }
    std::vector<foreign_batch> batches;
    if (foreign_count_.load(std::memory_order_relaxed) != 0) {
      std::lock_guard flock{foreign_mutex_};
      batches.swap(foreign_);
      foreign_count_.store(0, std::memory_order_relaxed);
    }
    if (!any_pending && lists.empty() && batches.empty()) return false;  // nothing to make usable
    std::vector<CUevent> events;
    events.reserve(batches.size());
    for (auto const& b : batches) events.push_back(b.event);

    // 2. One barrier after all of it.
    if (!tracker.barrier(events)) {
      put_back(pending, scratch_.pending_bytes, std::move(lists), std::move(batches));
      return false;
    }

    // 3. Everything taken is clean now: each pending shard's blocks go to the clean
    // shard of its index, the streams' lists and the batches to the caller's, which
    // is filed last, so that on_clean sees all of it.
    std::size_t const mine = shard_index();
    for (std::size_t i = 0; i < shard_count; ++i) {
      if (i == mine || pending[i].empty()) continue;
      std::lock_guard lock{clean_[i]};
      clean_[i].list.add_all(pending[i]);
      note_clean(i);
    }
    {
      entry& clean = clean_[mine];
      std::lock_guard lock{clean};
      clean.list.add_all(pending[mine]);
      for (auto& [e, l] : lists) clean.list.merge_from(std::move(l));
      for (auto& b : batches) clean.list.merge_from(std::move(b.list));
      on_clean(clean.list);
      note_clean(mine);
    }
    for (auto& b : batches) destroy_event(b.event);
    return true;
  }

  /// Stamps of the moves of free memory from one list to another made without the
  /// owner's growth mutex (gather_into, gather_spares_into, a stream adopting a
  /// clean block, a destroyed stream's list): while such a move is under way its
  /// blocks are in no list, so the thread about to answer "out of memory" (it holds
  /// the growth mutex) may have missed them. It takes moves() before its last look
  /// and again after: if any move was under way or happened in between, it looks
  /// again (wait_for_moves() first). Its own moves, under the growth mutex, are not
  /// counted: it cannot miss them.
  struct move_stamp {
    std::uint64_t started = 0;
    std::uint64_t finished = 0;
    friend bool operator==(move_stamp const&, move_stamp const&) = default;
    [[nodiscard]] bool quiet_since(move_stamp const& before) const noexcept {
      return *this == before && before.started == before.finished;
    }
  };
  [[nodiscard]] move_stamp moves() const noexcept {
    move_stamp m;
    m.started = moves_started_.load(std::memory_order_seq_cst);
    m.finished = moves_finished_.load(std::memory_order_seq_cst);
    return m;
  }
  /// Waits (yielding) until every move started before `m` was taken has finished.
  /// Moves never wait for a caller of this (they take no growth mutex).
  void wait_for_moves(move_stamp const& m) const noexcept {
    while (moves_finished_.load(std::memory_order_seq_cst) < m.started) std::this_thread::yield();
  }
  /// Marks a move under way for its lifetime (see moves()).
  class move_scope {
   public:
    explicit move_scope(stream_free_lists& l) noexcept : l_{l} {
      l_.moves_started_.fetch_add(1, std::memory_order_seq_cst);
    }
    ~move_scope() { l_.moves_finished_.fetch_add(1, std::memory_order_seq_cst); }
    move_scope(move_scope const&) = delete;
    move_scope& operator=(move_scope const&) = delete;

   private:
    stream_free_lists& l_;
  };

  /// Moves memory freed on other streams into taker.list, ordering the taker after
  /// those streams first. Returns whether anything moved. Call without holding
  /// any entry mutex.
  bool gather_into(entry& taker, std::size_t bytes, gather_mode mode) {
    GPUMEM_ASSERT(!taker.clean, "the clean list never gathers: it holds only memory no stream can touch");
    if (!can_order(taker)) return false;
    std::optional<move_scope> moving;
    if (mode != gather_mode::everything) moving.emplace(*this);
    List gathered;
    entry const* source = nullptr;
    bool any = take_foreign(taker, bytes, mode, gathered);
    if (!any || mode == gather_mode::everything) any = take_from_streams(taker, bytes, mode, gathered, source) || any;
    if (any) {
      std::lock_guard lock{taker};
      taker.list.merge_from(std::move(gathered));
      taker.took_from = source;
    }
    return any;
  }

  /// For a resource whose streams reuse their own latest free block (fixed_size):
  /// moves into taker.list a destroyed stream's batch, else the SPARE blocks of the
  /// first other stream that has some (its whole list but the block it freed last,
  /// which it will most likely ask for next), ordering the taker after that stream
  /// first. Unlike gather_into it never leaves a stream without a free block: a
  /// stream whose last block was taken takes a third stream's at its next
  /// allocation, and so on, each take an event record and a wait (and a growth
  /// whenever a thread finds every list empty meanwhile). List must offer
  /// has_spare() and move_spares_to(List&). Returns whether anything moved. Call
  /// without holding any entry mutex.
  bool gather_spares_into(entry& taker, std::size_t bytes) {
    GPUMEM_ASSERT(!taker.clean, "the clean list never gathers: it holds only memory no stream can touch");
    if (!can_order(taker)) return false;
    move_scope const moving{*this};
    List gathered;
    bool any = take_foreign(taker, bytes, gather_mode::first_fit, gathered);
    if (!any) {
      std::shared_lock lock{table_mutex_};
      for (auto const& [key, victim] : table_) {
        if (victim.get() == &taker) continue;
        std::lock_guard vlock{*victim};
        if (!victim->list.has_spare()) continue;
        CUstream const from = victim->id.record_handle();
        if (may_be_capturing(from)) continue;
        if (order_after(victim->event, from, taker.id.handle) != CUDA_SUCCESS) continue;
        victim->list.move_spares_to(gathered);
        any = true;
        break;
      }
    }
    if (any) {
      std::lock_guard lock{taker};
      taker.list.merge_from(std::move(gathered));
    }
    return any;
  }

  void stream_destroyed(stream_ref s) noexcept {
    auto const id = identify(s);
    if (id.is_default_stream()) return;
    move_scope const moving{*this};  // out of the table before it reaches the foreign batches
    entry_ptr e;
    {
      std::unique_lock lock{table_mutex_};
      auto it = table_.find(id.key);
      if (it == table_.end()) return;
      e = std::move(it->second);
      table_.erase(it);
      generation_.fetch_add(1, std::memory_order_release);  // invalidates every thread's hint
    }
    std::lock_guard lock{*e};  // settles its deferred free: it goes with the rest
    CUevent ev = std::exchange(e->event, nullptr);
    if (e->list.empty()) {
      destroy_event(ev);
      return;
    }
    bool const recorded = !may_be_capturing(id.handle) && record_event(ev, id.handle) == CUDA_SUCCESS;
    if (!recorded) destroy_event(ev);
    try {
      std::lock_guard flock{foreign_mutex_};
      if (recorded) {
        foreign_.push_back(foreign_batch{ev, std::move(e->list)});
        foreign_count_.store(foreign_.size(), std::memory_order_relaxed);
      } else {
        quarantine_.merge_from(std::move(e->list));
      }
    } catch (...) {
      // Out of host memory: the blocks stay out of circulation (safe, only leaked).
      if (recorded) destroy_event(ev);
    }
  }

  /// Inside with_all_locked(): finds the regions all of whose bytes are free in
  /// lists this thread can order, removes them from the lists and returns them,
  /// each with a stream ordered after every stream that holds part of it (one
  /// holder's stream, made to wait on the others' events; no driver call when a
  /// single live stream, or only the clean list, holds it). region_size(base)
  /// gives a region's size and the bytes of it that must be free in lists (less
  /// when part of it is in none: released pages). Regions held partly by a
  /// capturing stream, or partly pending, stay.
  template <class RegionSize>
  std::vector<free_region> extract_free_regions(locked_view& v, RegionSize&& region_size) {
    struct holdings {
      std::size_t bytes = 0;
      std::vector<entry*> streams;  ///< holders that need ordering (the clean list needs none)
      std::vector<foreign_batch*> batches;
    };
    std::unordered_map<char*, holdings> by_region;
    for (entry* e : v.entries) {
      e->list.for_each_piece([&](char* base, std::size_t n) {
        auto& h = by_region[base];
        h.bytes += n;
        if (!e->clean && std::find(h.streams.begin(), h.streams.end(), e) == h.streams.end()) h.streams.push_back(e);
      });
    }
    for (auto& b : v.foreign) {
      b.list.for_each_piece([&](char* base, std::size_t n) {
        auto& h = by_region[base];
        h.bytes += n;
        if (std::find(h.batches.begin(), h.batches.end(), &b) == h.batches.end()) h.batches.push_back(&b);
      });
    }

    std::unordered_map<foreign_batch*, bool> completed;  // batch -> its event completed
    std::set<std::pair<void const*, CUstream>> ordered;  // (holder, target) pairs already ordered
    auto const is_done = [&](foreign_batch* b) {
      auto [it, fresh] = completed.try_emplace(b, false);
      if (fresh) it->second = query_event(b->event) == CUDA_SUCCESS;
      return it->second;
    };
    auto const pair_key = [](void const* a, CUstream t) { return std::pair<void const*, CUstream>{a, t}; };
    std::vector<free_region> out;
    for (auto& [base, h] : by_region) {
      auto const [size, listed] = region_size(base);
      if (h.bytes != listed) continue;
      // Given back on a holder's stream this thread can name (others are ordered
      // before it), else on the legacy stream.
      auto const own = std::find_if(h.streams.begin(), h.streams.end(),
                                    [](entry* e) { return e->id.usable_from_this_thread(); });
      if (own != h.streams.end()) std::iter_swap(h.streams.begin(), own);
      CUstream const target = own != h.streams.end() ? h.streams.front()->id.handle
                                                     : reinterpret_cast<CUstream>(legacy_stream_handle);
      std::size_t const first_other = own != h.streams.end() ? 1 : 0;
      // Never hand a capturing stream to the upstream (without a driver nothing captures).
      if (driver_available() && may_be_capturing(target)) continue;
      bool const needs_order = h.streams.size() > first_other ||
                               std::any_of(h.batches.begin(), h.batches.end(), [&](auto* b) { return !is_done(b); });
      if (needs_order) {
        bool ok = true;
        for (std::size_t i = first_other; ok && i < h.streams.size(); ++i) {
          entry* o = h.streams[i];
          if (ordered.contains(pair_key(o, target))) continue;
          CUstream const from = o->id.record_handle();
          ok = !may_be_capturing(from) && order_after(o->event, from, target) == CUDA_SUCCESS;
          if (ok) ordered.insert(pair_key(o, target));
        }
        for (auto* b : h.batches) {
          if (!ok || is_done(b) || ordered.contains(pair_key(b, target))) continue;
          ok = wait_event(target, b->event) == CUDA_SUCCESS;
          if (ok) ordered.insert(pair_key(b, target));
        }
        if (!ok) continue;
      }
      out.push_back({base, size, target});
    }
    if (out.empty()) return out;
    std::sort(out.begin(), out.end());
    for (entry* e : v.entries) e->list.remove_regions(out);
    for (auto& b : v.foreign) b.list.remove_regions(out);
    std::erase_if(v.foreign, [](foreign_batch& b) {
      if (!b.list.empty()) return false;
      destroy_event(b.event);
      return true;
    });
    foreign_count_.store(v.foreign.size(), std::memory_order_relaxed);
    return out;
  }

  /// Calls f(locked_view&) with every entry (the clean one first), the foreign
  /// batches and the quarantine locked; for release() and info(). The caller may
  /// hold its growth mutex (it comes first in the lock order). Pending blocks are
  /// not in the view: pending_bytes() counts them.
  template <class F>
  decltype(auto) with_all_locked(F&& f) {
    std::vector<entry_ptr> keep;
    {
      std::shared_lock lock{table_mutex_};
      keep.reserve(table_.size() + shard_count);
      keep.insert(keep.end(), clean_.entries().begin(), clean_.entries().end());
      for (auto const& [key, e] : table_) keep.push_back(e);
    }
    std::sort(keep.begin() + shard_count, keep.end(),
              [](entry_ptr const& a, entry_ptr const& b) { return a->id.key < b->id.key; });
    std::vector<std::unique_lock<entry>> locks;
    locks.reserve(keep.size());
    locked_view view{{}, foreign_, quarantine_};
    view.entries.reserve(keep.size());
    for (auto const& e : keep) {
      locks.emplace_back(*e);
      view.entries.push_back(e.get());
    }
    std::lock_guard flock{foreign_mutex_};
    return f(view);
  }

 private:
  struct lookup_hint {
    std::uint64_t instance{};
    std::uint64_t generation{};
    std::uintptr_t key{};
    entry_ptr e;  ///< keeps a dropped entry alive while a hint names it (host memory only)
  };
  static std::array<lookup_hint, thread_cache_slots>& lookup_hints() noexcept {
    thread_local std::array<lookup_hint, thread_cache_slots> hints{};
    return hints;
  }

  /// The calling thread's hint, made to name the entry of `s`. Ends this thread's
  /// borrows: the hint it replaces may have kept a borrowed entry alive.
  lookup_hint& lookup(stream_ref s) {
    end_borrows();
    // The key without identify()'s call, but for the per-thread default stream.
    auto key = stream_key(s);
    if (key == per_thread_stream_handle) key = identify(s).key;
    auto& hint = lookup_hints()[instance_ % thread_cache_slots];
    auto const generation = generation_.load(std::memory_order_acquire);  // before the lookup
    if (hint.instance == instance_ && hint.key == key && hint.generation == generation) return hint;
    return refresh(hint, identify(s), generation);
  }
  /// owns()'s claim of an unowned entry: recorded for the thread's exit first
  /// (which needs the entry's shared pointer: the hint that borrow() used).
  [[gnu::noinline]] bool claim(entry& e) noexcept {
    if (e.clean || tl_owner_tag == owner_tag_exited) return false;
    auto const& hint = lookup_hints()[instance_ % thread_cache_slots];
    if (hint.instance != instance_ || hint.e.get() != &e) return false;
    if (tl_owner_tag == owner_tag_none) tl_owner_tag = this_thread_tag();
    try {
      tl_owned_entries.add(std::shared_ptr<std::atomic<std::uint64_t>>{hint.e, &e.owner});
    } catch (...) {
      return false;  // no host memory to record it: no claim, the frees take the lock
    }
    std::uint64_t expected = 0;
    // acquire: the previous owner's deferred frees (it released the word as it exited)
    return e.owner.compare_exchange_strong(expected, tl_owner_tag, std::memory_order_acquire,
                                           std::memory_order_relaxed);
  }

  /// lookup()'s miss: the entry found or made, named by the hint from now on.
  [[gnu::noinline]] lookup_hint& refresh(lookup_hint& hint, stream_identity const& id, std::uint64_t generation) {
    entry_ptr e = find_or_add(id);
    hint = {instance_, generation, id.key, std::move(e)};
    return hint;
  }

  /// Whether this thread may order `taker` after other streams. A thread on which
  /// the program never made a context current (a worker of its own) would fail
  /// every event record and wait, and so grow where it should take: it gets device
  /// 0's primary context first, as its first runtime call would, and as the
  /// upstream's allocation does when the resource grows.
  static bool can_order(entry const& taker) noexcept {
    if (!taker.id.usable_from_this_thread()) return false;
    static_cast<void>(ensure_context());  // failing, the record or wait fails and says so
    return !may_be_capturing(taker.id.handle);
  }

  entry_ptr find_or_add(stream_identity const& id) {
    {
      std::shared_lock lock{table_mutex_};
      if (auto it = table_.find(id.key); it != table_.end()) return it->second;
    }
    std::unique_lock lock{table_mutex_};
    auto [it, inserted] = table_.try_emplace(id.key);
    if (inserted) it->second = std::make_shared<entry>(id);
    return it->second;
  }

  bool take_foreign(entry& taker, std::size_t bytes, gather_mode mode, List& out) {
    if (foreign_count_.load(std::memory_order_relaxed) == 0) return false;  // the usual case: no lock
    std::lock_guard lock{foreign_mutex_};
    bool any = false;
    for (auto it = foreign_.begin(); it != foreign_.end();) {
      if (mode == gather_mode::first_fit && !it->list.can_serve(bytes)) {
        ++it;
        continue;
      }
      CUresult const done = query_event(it->event);
      if (done != CUDA_SUCCESS &&
          !(done == CUDA_ERROR_NOT_READY && wait_event(taker.id.handle, it->event) == CUDA_SUCCESS)) {
        ++it;
        continue;
      }
      out.merge_from(std::move(it->list));
      destroy_event(it->event);  // safe while the taker's wait is pending
      it = foreign_.erase(it);
      foreign_count_.store(foreign_.size(), std::memory_order_relaxed);
      any = true;
      if (mode == gather_mode::first_fit) break;
    }
    return any;
  }

  /// first_fit's move of `victim`'s list into `out`. Two streams taking each other's
  /// memory in turn (the victim's last take was from the taker) may share it instead
  /// (List::share_into): each keeps part, and they settle where each take would
  /// otherwise move the whole list back, an event record and a wait per allocation.
  /// Other takes move everything, so free memory stays together, where it coalesces.
  static void take_list(entry& victim, entry const& taker, std::size_t bytes, List& out) {
    if constexpr (requires(List & l) { l.share_into(l, bytes); }) {
      if (victim.took_from == &taker) {
        victim.list.share_into(out, bytes);
        return;
      }
    }
    out.merge_from(std::move(victim.list));
  }

  /// `source`: the one stream taken from in first_fit mode (else null).
  bool take_from_streams(entry& taker, std::size_t bytes, gather_mode mode, List& out, entry const*& source) {
    std::shared_lock lock{table_mutex_};
    bool any = false;
    for (auto const& [key, victim] : table_) {
      if (victim.get() == &taker) continue;
      std::lock_guard vlock{*victim};
      if (victim->list.empty() || (mode == gather_mode::first_fit && !victim->list.can_serve(bytes))) continue;
      CUstream const from = victim->id.record_handle();
      if (may_be_capturing(from)) continue;
      if (order_after(victim->event, from, taker.id.handle) != CUDA_SUCCESS) continue;
      any = true;
      if (mode == gather_mode::everything) {
        out.merge_from(std::move(victim->list));
        continue;
      }
      source = victim.get();
      take_list(*victim, taker, bytes, out);
      break;
    }
    return any;
  }

  /// reclaim() could not make its barrier: everything returns where it was.
  void put_back(std::array<std::vector<block_type>, shard_count>& pending,
                std::array<std::size_t, shard_count> const& pending_bytes,
                std::vector<std::pair<entry_ptr, List>>&& lists, std::vector<foreign_batch>&& batches) noexcept {
    for (std::size_t i = 0; i < shard_count; ++i) {
      if (!pending[i].empty()) pending_.put_back(i, pending[i], pending_bytes[i]);
    }
    for (auto& [e, l] : lists) {
      std::lock_guard lock{*e};
      try {
        e->list.merge_from(std::move(l));
      } catch (...) {}
    }
    try {
      std::lock_guard flock{foreign_mutex_};
      for (auto& b : batches) foreign_.push_back(std::move(b));
      foreign_count_.store(foreign_.size(), std::memory_order_relaxed);
    } catch (...) {
      for (auto& b : batches) destroy_event(b.event);
    }
  }

  /// Debug builds: marks a reclaim() under way (reclaims must not overlap: their
  /// callers hold a growth mutex) and, as it starts, checks each pending shard's
  /// count. Nothing in release builds.
  class reclaim_scope {
   public:
    explicit reclaim_scope([[maybe_unused]] stream_free_lists& lists) noexcept {
#ifndef NDEBUG
      lists_ = &lists;
      GPUMEM_ASSERT(!lists.reclaiming_.exchange(true), "stream_free_lists: two reclaims at once");
      lists.pending_.check_all();
#endif
    }
    ~reclaim_scope() {
#ifndef NDEBUG
      lists_->reclaiming_.store(false);
#endif
    }
    reclaim_scope(reclaim_scope const&) = delete;
    reclaim_scope& operator=(reclaim_scope const&) = delete;

   private:
#ifndef NDEBUG
    stream_free_lists* lists_ = nullptr;
#endif
  };

  std::uint64_t const instance_ = next_instance_id<stream_free_lists>();
  std::atomic<std::uint64_t> generation_{0};  ///< bumped whenever an entry leaves the table
  std::shared_mutex table_mutex_;
  std::unordered_map<std::uintptr_t, entry_ptr> table_;
  clean_shards<List> clean_;
  std::mutex foreign_mutex_;
  std::vector<foreign_batch> foreign_;         // guarded by foreign_mutex_
  std::atomic<std::size_t> foreign_count_{0};  // foreign_.size(), read without the lock
  List quarantine_;                            // guarded by foreign_mutex_
  pending_shards<block_type> pending_;
  /// reclaim()'s working vectors, empty between reclaims (their capacity kept).
  struct reclaim_scratch {
    std::array<std::vector<block_type>, shard_count> pending;  ///< by shard
    std::array<std::size_t, shard_count> pending_bytes{};      ///< what each shard's blocks counted for
    std::vector<entry_ptr> entries;
    std::vector<std::pair<entry_ptr, List>> lists;
  };
  /// Empties them however reclaim() returns: no entry outlives it here.
  struct scratch_clearer {
    reclaim_scratch& s;
    ~scratch_clearer() {
      for (auto& v : s.pending) v.clear();
      s.entries.clear();
      s.lists.clear();
    }
  };
  reclaim_scratch scratch_;                       ///< used only by reclaim(), which never overlaps itself
  std::atomic<std::uint64_t> moves_started_{0};   ///< move_scope; see moves()
  std::atomic<std::uint64_t> moves_finished_{0};  ///< move_scope; see moves()
#ifndef NDEBUG
  std::atomic<bool> reclaiming_{false};
#endif
};

}  // namespace gpumem::detail
