#pragma once
// stream_free_lists<List>: the per-stream free lists of a stream-ordered caching
// resource (pool_memory_resource, fixed_size_memory_resource), and the rules for
// moving memory between streams without blocking the host.
//
// - Each stream has an entry: a mutex, its List, and one reusable event, created
//   the first time another stream takes memory from it.
// - gather_into(taker): memory freed on other streams moves to the taker only
//   after the taker waits on it: a destroyed stream's batch waits on the event
//   recorded at destruction (or not at all once it completed); a live stream's
//   event is recorded at that moment and the taker waits on it. The wait covers
//   the victim's whole list, so all of it moves. A capturing stream is never
//   recorded on or made to wait.
// - stream_destroyed(s): s's list becomes a foreign batch guarded by one event
//   recorded on s; the entry is dropped, so a new stream reusing the handle starts
//   clean. If no event can be recorded (s capturing, driver failure), the blocks
//   are quarantined: never reused, returned only when the resource is destroyed.
// - The per-thread default stream has one entry per thread. Another thread
//   cannot name it, so it orders after it through the legacy stream
//   (stream_identity::record_handle()).
//
// Locking (lock order, outermost first): the owner's growth mutex -> table_mutex_
// (shared for lookups and gathers, exclusive to add/drop a stream) -> entry
// mutexes (several only in with_all_locked(), in ascending key order) ->
// foreign_mutex_. allocate/deallocate hold at most one entry mutex at a time.
//
// List requirements: default-constructible, movable, merge_from(List&&) (leaves
// the source empty), can_serve(bytes), empty(), for_each_piece(f(region_base,
// bytes)) and remove_regions(sorted vector<free_region>) — a region being one
// upstream allocation (a pool slab, a fixed_size chunk).

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/stream_ordering.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
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

template <class List>
class stream_free_lists {
 public:
  struct entry {
    explicit entry(stream_identity i) : id{i} {}
    stream_identity const id;
    std::mutex mutex;
    List list;         ///< guarded by mutex
    CUevent event{};   ///< guarded by mutex
    /// Bytes the owner grew on behalf of this stream; the owner's growth mutex guards it.
    std::size_t grown{};
  };
  using entry_ptr = std::shared_ptr<entry>;

  struct foreign_batch {
    CUevent event{};  ///< recorded on the destroyed stream after its last free
    List list;
  };

  /// What with_all_locked() hands its callback: everything, locked.
  struct locked_view {
    std::vector<entry*> entries;  ///< ascending key
    std::vector<foreign_batch>& foreign;
    List& quarantine;
  };

  enum class gather_mode {
    first_fit,  ///< stop at the first source that can serve `bytes`
    everything  ///< take all that can be ordered (before growing fails for good)
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
  [[nodiscard]] entry& borrow(stream_ref s) { return *lookup(s).e; }

  /// Moves memory freed on other streams into taker.list, ordering the taker after
  /// those streams first. Returns whether anything moved. Call without holding
  /// any entry mutex.
  bool gather_into(entry& taker, std::size_t bytes, gather_mode mode) {
    if (!taker.id.usable_from_this_thread() || is_capturing(taker.id.handle)) return false;
    List gathered;
    bool any = take_foreign(taker, bytes, mode, gathered);
    if (!any || mode == gather_mode::everything) any = take_from_streams(taker, bytes, mode, gathered) || any;
    if (any) {
      std::lock_guard lock{taker.mutex};
      taker.list.merge_from(std::move(gathered));
    }
    return any;
  }

  void stream_destroyed(stream_ref s) noexcept {
    auto const id = identify(s);
    if (id.is_default_stream()) return;
    entry_ptr e;
    {
      std::unique_lock lock{table_mutex_};
      auto it = table_.find(id.key);
      if (it == table_.end()) return;
      e = std::move(it->second);
      table_.erase(it);
      generation_.fetch_add(1, std::memory_order_release);  // invalidates every thread's hint
    }
    std::lock_guard lock{e->mutex};
    CUevent ev = std::exchange(e->event, nullptr);
    if (e->list.empty()) {
      destroy_event(ev);
      return;
    }
    bool const recorded = !is_capturing(id.handle) && record_event(ev, id.handle) == CUDA_SUCCESS;
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
  /// single live stream holds it all). region_size(base) gives a region's size.
  /// Regions held partly by a capturing stream stay.
  template <class RegionSize>
  std::vector<free_region> extract_free_regions(locked_view& v, RegionSize&& region_size) {
    struct holdings {
      std::size_t bytes = 0;
      std::vector<entry*> streams;
      std::vector<foreign_batch*> batches;
    };
    std::unordered_map<char*, holdings> by_region;
    for (entry* e : v.entries) {
      e->list.for_each_piece([&](char* base, std::size_t n) {
        auto& h = by_region[base];
        h.bytes += n;
        if (std::find(h.streams.begin(), h.streams.end(), e) == h.streams.end()) h.streams.push_back(e);
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
      std::size_t const size = region_size(base);
      if (h.bytes != size) continue;
      // Given back on a holder's stream this thread can name (others are ordered
      // before it), else on the legacy stream.
      auto const own = std::find_if(h.streams.begin(), h.streams.end(),
                                    [](entry* e) { return e->id.usable_from_this_thread(); });
      if (own != h.streams.end()) std::iter_swap(h.streams.begin(), own);
      CUstream const target = own != h.streams.end() ? h.streams.front()->id.handle
                                                     : reinterpret_cast<CUstream>(legacy_stream_handle);
      std::size_t const first_other = own != h.streams.end() ? 1 : 0;
      // Never hand a capturing stream to the upstream (without a driver nothing captures).
      if (driver_available() && is_capturing(target)) continue;
      bool const needs_order =
          h.streams.size() > first_other || std::any_of(h.batches.begin(), h.batches.end(), [&](auto* b) { return !is_done(b); });
      if (needs_order) {
        bool ok = true;
        for (std::size_t i = first_other; ok && i < h.streams.size(); ++i) {
          entry* o = h.streams[i];
          if (ordered.contains(pair_key(o, target))) continue;
          CUstream const from = o->id.record_handle();
          ok = !is_capturing(from) && order_after(o->event, from, target) == CUDA_SUCCESS;
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

  /// Calls f(locked_view&) with every entry, the foreign batches and the
  /// quarantine locked; for release() and info(). The caller may hold its growth
  /// mutex (it comes first in the lock order).
  template <class F>
  decltype(auto) with_all_locked(F&& f) {
    std::vector<entry_ptr> keep;
    {
      std::shared_lock lock{table_mutex_};
      keep.reserve(table_.size());
      for (auto const& [key, e] : table_) keep.push_back(e);
    }
    std::sort(keep.begin(), keep.end(), [](entry_ptr const& a, entry_ptr const& b) { return a->id.key < b->id.key; });
    std::vector<std::unique_lock<std::mutex>> locks;
    locks.reserve(keep.size());
    locked_view view{{}, foreign_, quarantine_};
    view.entries.reserve(keep.size());
    for (auto const& e : keep) {
      locks.emplace_back(e->mutex);
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

  /// The calling thread's hint, made to name the entry of `s`.
  lookup_hint& lookup(stream_ref s) {
    auto const id = identify(s);
    auto& hint = lookup_hints()[instance_ % thread_cache_slots];
    auto const generation = generation_.load(std::memory_order_acquire);  // before the lookup
    if (hint.instance == instance_ && hint.key == id.key && hint.generation == generation) return hint;
    entry_ptr e = find_or_add(id);
    hint = {instance_, generation, id.key, std::move(e)};
    return hint;
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
      if (done != CUDA_SUCCESS && !(done == CUDA_ERROR_NOT_READY && wait_event(taker.id.handle, it->event) == CUDA_SUCCESS)) {
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

  bool take_from_streams(entry& taker, std::size_t bytes, gather_mode mode, List& out) {
    std::shared_lock lock{table_mutex_};
    bool any = false;
    for (auto const& [key, victim] : table_) {
      if (victim.get() == &taker) continue;
      std::lock_guard vlock{victim->mutex};
      if (victim->list.empty() || (mode == gather_mode::first_fit && !victim->list.can_serve(bytes))) continue;
      CUstream const from = victim->id.record_handle();
      if (is_capturing(from)) continue;
      if (order_after(victim->event, from, taker.id.handle) != CUDA_SUCCESS) continue;
      out.merge_from(std::move(victim->list));
      any = true;
      if (mode == gather_mode::first_fit) break;
    }
    return any;
  }

  std::uint64_t const instance_ = next_instance_id();
  std::atomic<std::uint64_t> generation_{0};  ///< bumped whenever an entry leaves the table
  std::shared_mutex table_mutex_;
  std::unordered_map<std::uintptr_t, entry_ptr> table_;
  std::mutex foreign_mutex_;
  std::vector<foreign_batch> foreign_;  // guarded by foreign_mutex_
  std::atomic<std::size_t> foreign_count_{0};  // foreign_.size(), read without the lock
  List quarantine_;                     // guarded by foreign_mutex_
};

}  // namespace gpumem::detail
