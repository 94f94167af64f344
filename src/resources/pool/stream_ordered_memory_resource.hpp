#pragma once
// stream_ordered_memory_resource<List, Payload>: what the stream-ordered caching
// resources (pool_memory_resource, fixed_size_memory_resource) share, as RMM's
// class of the same name does for its pool and fixed-size resources. Each resource
// keeps its own allocation policy (where a request looks first, when a miss
// reclaims, how much it grows); this class holds the rest, and the rule for how
// much waiting memory is worth a barrier (reclaim_threshold):
//  - the upstream and the regions obtained from it (region_table): the lookup for
//    deallocate and owns(), the bytes reserved;
//  - the free memory (stream_free_lists<List>) and its reclamation, counted;
//  - growth: one upstream allocation with synchronous semantics (usable at once by
//    any stream), registered, on the device the first growth resolves; for the
//    pool, joined to the region it continues when the upstream maps it right after
//    (grow_joined);
//  - release: reclaim, take the fully free regions out of the lists and give them
//    back upstream, each on a stream ordered after every stream that freed part of it;
//  - info(): bytes reserved, free (pending included), pending, largest free block;
//  - teardown: every region back upstream, in use or not (as RMM does).
// Unlike RMM's it is not a device_memory_resource itself: the public classes keep
// their pimpl and forward do_release, do_info, do_owns and do_stream_destroyed to
// it, so their headers stay free of these details.
//
// Locking, outermost first: growth_mutex() (growth, reclamation, release, info) ->
// the free lists' locks (stream_free_lists.hpp) -> the region table's (a leaf).
// Members documented "caller holds growth_mutex()" rely on it.

#include <gpumem/call_context.hpp>
#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/slow_work.hpp>
#include <gpumem/device_memory_resource.hpp>
#include <gpumem/error.hpp>
#include <gpumem/stream_tracker.hpp>
#include "region_table.hpp"
#include "stream_free_lists.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem::detail {

template <stream_free_list List, class Payload = no_payload>
class stream_ordered_memory_resource {
 public:
  using lists_type = stream_free_lists<List>;
  using entry = typename lists_type::entry;
  using gather_mode = typename lists_type::gather_mode;
  using region = typename region_table<Payload>::region;

  /// Throws logic_error naming `resource` for a null upstream. `device`: whose
  /// streams a reclamation barrier orders; -1: the device of the context current
  /// at the first growth.
  stream_ordered_memory_resource(device_memory_resource* upstream, char const* resource, int device = -1)
      : upstream_{upstream}, tracker_{device >= 0 ? &stream_tracker::of(device) : nullptr} {
    if (upstream_ == nullptr) throw logic_error{std::string{"gpumem: "} + resource + " needs an upstream resource"};
  }
  /// Every region goes back upstream, in use or not: the resource owns them.
  ~stream_ordered_memory_resource() {
    end_borrows();
    scoped_synchronous_call sync;  // as they were obtained: no stream order to keep
    regions_.for_each_piece([&](char* base, std::size_t size) { upstream_->deallocate(base, size, stream_ref{}); });
  }
  stream_ordered_memory_resource(stream_ordered_memory_resource const&) = delete;
  stream_ordered_memory_resource& operator=(stream_ordered_memory_resource const&) = delete;

  [[nodiscard]] device_memory_resource* upstream() const noexcept { return upstream_; }
  [[nodiscard]] lists_type& lists() noexcept { return lists_; }
  [[nodiscard]] lists_type const& lists() const noexcept { return lists_; }
  [[nodiscard]] region_table<Payload>& regions() noexcept { return regions_; }
  [[nodiscard]] std::mutex& growth_mutex() noexcept { return growth_mutex_; }
  /// Bytes of addresses held from the upstream (the regions' sizes).
  [[nodiscard]] std::size_t reserved_bytes() const noexcept { return regions_.reserved_bytes(); }
  /// Bytes of those backed by device memory: all but the released pages.
  /// Read without the lock, the two counts may be a moment apart: never below 0.
  [[nodiscard]] std::size_t committed_bytes() const noexcept {
    std::size_t const reserved = regions_.reserved_bytes();
    std::size_t const released = released_bytes_.load(std::memory_order_relaxed);
    return reserved > released ? reserved - released : 0;
  }
  /// Bytes of released pages (addresses held, device memory given back).
  [[nodiscard]] std::size_t released_bytes() const noexcept { return released_bytes_.load(std::memory_order_relaxed); }
  /// The stream tracker of the memory's device; null before the first growth.
  [[nodiscard]] stream_tracker* tracker() const noexcept { return tracker_.load(std::memory_order_acquire); }
  /// Reclamations made so far (each one barrier).
  [[nodiscard]] std::size_t reclaim_count() const noexcept { return reclaims_.load(std::memory_order_relaxed); }

  /// A new region of `bytes` from the upstream, registered with the payload
  /// make_payload(base) returns (no_payload{} by default); a null region if the
  /// upstream is out of memory. Allocated with synchronous semantics on the legacy
  /// stream, so it is usable at once by any stream. Other failures propagate,
  /// with nothing kept. Caller holds growth_mutex().
  template <class MakePayload>
  region grow(std::size_t bytes, MakePayload&& make_payload) {
    return from_upstream<region>(bytes, [&](char* base) {
      Payload& p = regions_.insert(base, bytes, make_payload(base));
      return region{base, bytes, &p};
    });
  }
  region grow(std::size_t bytes) {
    return grow(bytes, [](char*) { return Payload{}; });
  }

  /// What grow_joined() obtained: `bytes` of new memory at `ptr`, belonging to the
  /// region starting at `region` (== ptr unless it continues an earlier one).
  struct grown_memory {
    char* ptr{};
    std::size_t bytes{};
    char* region{};
    explicit operator bool() const noexcept { return ptr != nullptr; }
  };

  /// grow() for a resource whose blocks may span its growths (the pool): when the
  /// upstream places the new memory right after a region in one range of virtual
  /// addresses (device_memory_resource::extends), the region is extended instead
  /// of a new one registered, so free blocks on both sides of the seam coalesce.
  /// A null growth if the upstream is out of memory. Caller holds growth_mutex().
  grown_memory grow_joined(std::size_t bytes) {
    return from_upstream<grown_memory>(bytes, [&](char* p) -> grown_memory {
      auto const before = regions_.find(p - 1);
      if (before && before.base + before.size == p && upstream_->extends(p, p) && regions_.extend(before.base, bytes)) {
        return {p, bytes, before.base};
      }
      regions_.insert(p, bytes);
      return {p, bytes, p};
    });
  }

  // -- Released pages -------------------------------------------------------------
  // A resource whose upstream can decommit (vmm_memory_resource) takes the pages
  // wholly inside free blocks out of its lists and gives their device memory back
  // (the pool's policy decides which and when); the addresses stay in their region,
  // recorded here as released ranges, until the resource commits them again or the
  // region goes back upstream. Ranges never join across regions. All of it under
  // growth_mutex().

  /// Records [p, p + bytes) of region `owner` as released (joined with its neighbours).
  /// Throws (changing nothing) if no host memory is left for a new range.
  void note_released(char* p, std::size_t bytes, char* owner) {
    std::size_t const added = bytes;
    auto next = released_.lower_bound(p);
    bool const join_next = next != released_.end() && next->first == p + bytes && next->second.region == owner;
    auto prev = next == released_.begin() ? released_.end() : std::prev(next);
    bool const join_prev = prev != released_.end() && prev->second.region == owner &&
                           prev->first + prev->second.size == p;
    if (join_prev) {
      prev->second.size += bytes + (join_next ? next->second.size : 0);
      if (join_next) released_.erase(next);
    } else if (join_next) {
      auto node = released_.extract(next);        // re-keyed, not reallocated
      if (node.empty()) __builtin_unreachable();  // an element's node (spares -Wnull-dereference)
      node.key() = p;
      node.mapped().size += bytes;
      released_.insert(std::move(node));
    } else {
      released_.emplace(p, released_range{bytes, owner});
    }
    released_bytes_.fetch_add(added, std::memory_order_relaxed);
  }

  /// Calls f(start, bytes, region) for each released range, in address order.
  template <class F>
  void for_each_released(F&& f) const {
    for (auto const& [at, r] : released_) f(at, r.size, r.region);
  }

  /// Takes [at, at + bytes) from the start of the released range that starts at
  /// `at` (it must hold them). The caller commits them, or gives them back with
  /// note_released().
  void take_released_at(char* at, std::size_t bytes) {
    auto const it = released_.find(at);
    GPUMEM_ASSERT(it != released_.end() && it->second.size >= bytes, "take_released_at: no such released range");
    if (it == released_.end() || it->second.size < bytes) return;
    if (it->second.size == bytes) {
      released_.erase(it);
    } else {
      auto node = released_.extract(it);  // re-keyed, not reallocated
      if (node.empty()) __builtin_unreachable();
      node.key() = at + bytes;
      node.mapped().size -= bytes;
      released_.insert(std::move(node));
    }
    released_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  }

  /// Bytes released inside the region [base, base + size).
  [[nodiscard]] std::size_t released_in(char* base, std::size_t size) const {
    std::size_t n = 0;
    for (auto it = released_.lower_bound(base); it != released_.end() && it->first < base + size; ++it) {
      n += it->second.size;
    }
    return n;
  }

  /// Forgets the released ranges of a region that goes back upstream.
  void forget_released(char* base, std::size_t size) {
    auto it = released_.lower_bound(base);
    while (it != released_.end() && it->first < base + size) {
      released_bytes_.fetch_sub(it->second.size, std::memory_order_relaxed);
      it = released_.erase(it);
    }
  }

  /// Undoes grow() for a region none of whose memory was handed out or filed
  /// (its bookkeeping failed): unregistered and given back. Caller holds growth_mutex().
  void undo_growth(char* base) noexcept {
    std::size_t const size = regions_.erase(base);
    if (size == 0) return;
    end_borrows();
    scoped_synchronous_call sync;
    upstream_->deallocate(base, size, stream_ref{});
  }

  /// Takes growth_mutex() into `lock`. While another thread holds it (a reclaim
  /// files each thread's frees in that thread's clean shard as it goes; a growth
  /// files new memory), calls look() between tries, which returns memory from the
  /// list the request is served from first (the thread's own clean shard, or its
  /// stream's list) or nullptr: the request goes on as soon as memory reaches it
  /// rather than after the rest of the reclaim (on an H100 with 16 threads in a
  /// cudaMalloc+cudaFree loop, a wait for the lock averaged 130-180 us). The looks
  /// stop after a few hundred (a growth of many GiB can hold the lock for
  /// milliseconds: the thread then sleeps on the lock rather than spin). Returns
  /// what look() found (the lock then not taken), or nullptr with the lock taken.
  template <class Look>
  char* lock_growth_or_take(std::unique_lock<std::mutex>& lock, Look&& look) {
    constexpr int most_looks = 256;
    note_slow_work();  // the slow path: it may wait, grow or reclaim
    lock = std::unique_lock<std::mutex>{growth_mutex_, std::try_to_lock};
    for (int i = 0; i < most_looks && !lock.owns_lock(); ++i) {
      if (char* p = look()) return p;
      std::this_thread::yield();
      static_cast<void>(lock.try_lock());
    }
    if (!lock.owns_lock()) lock.lock();
    return nullptr;
  }

  /// One reclamation (a barrier, stream_free_lists::reclaim); caller holds growth_mutex().
  /// `on_clean(List&)` runs with the reclaimed memory in the clean list, still locked.
  template <class OnClean>
  bool reclaim(OnClean&& on_clean) {
    auto* const tracker = tracker_.load(std::memory_order_relaxed);
    if (tracker == nullptr) return false;  // never grew: nothing can be waiting
    // Pending memory peaks just before a reclamation takes it.
    peak_pending_ = std::max(peak_pending_, lists_.pending_bytes());
    bool const done = lists_.reclaim(*tracker, std::forward<OnClean>(on_clean));
    if (done) reclaims_.fetch_add(1, std::memory_order_relaxed);
    return done;
  }
  bool reclaim() {
    return reclaim([](List&) {});
  }

  /// Below this much waiting memory a miss grows rather than reclaims (unless the
  /// resource chooses a lower floor).
  static constexpr std::size_t reclaim_floor = std::size_t{8} << 20;
  /// The least the floor shrinks to where barriers are cheap (reclaim_threshold).
  /// Measured on an H100 with a PyTorch MLP (no non-blocking stream: a barrier is one
  /// event record): 1 MiB peaked at 842 MiB, the process's whole footprint under
  /// PyTorch's caching allocator, with 3600 barriers a run; 2 MiB at 856 MiB with 3126.
  static constexpr std::size_t least_reclaim_floor = std::size_t{1} << 20;

  /// Waiting memory worth a barrier for a request of `size`: at least the request,
  /// and a share of what the resource holds within a floor..512 MiB, the share and
  /// the floor sized to what a barrier costs. For k non-blocking streams and g
  /// green contexts a barrier makes k queries and up to 2k + 3g + 1 other driver
  /// calls (PyTorch makes 32 streams: 10-50 us on an H100): from 16 streams on
  /// (or their cost in green contexts) the share is 1/32 and the floor
  /// `floor`; with none (one event record) the share is 1/1056 and the floor
  /// floor/33, but at least min(floor, least_reclaim_floor) (1 MiB; with the pool's
  /// 4096-block rule, a barrier per 4096 small frees at most); in proportion
  /// between. So barriers stay rare where they cost, and memory waiting for one
  /// makes the resource grow by at most 1/32 of it (by 1/1056 or 1 MiB where a
  /// barrier is one driver call).
  /// Measured on an H100 with the pool: against 2..8 MiB, 8..32 MiB took a PyTorch
  /// MLP from 1319 barriers to 480; against 8..32 MiB, 8..512 MiB took a transformer
  /// with varying shapes (32 streams) from 7374 to 3090 with 0.3% more peak reserved
  /// memory (35.4 GiB).
  [[nodiscard]] std::size_t reclaim_threshold(std::size_t size, std::size_t floor = reclaim_floor) const noexcept {
    constexpr std::size_t divisor = 32;
    constexpr std::size_t full_cost = 33;  // driver calls of a barrier joining 16 busy streams
    constexpr std::size_t cap = std::size_t{512} << 20;
    std::size_t const cost = barrier_cost(full_cost);
    std::size_t const share = reserved_bytes() / (divisor * full_cost) * cost;
    std::size_t const low = std::max(floor / full_cost * cost, std::min(floor, least_reclaim_floor));
    return std::max(size, std::clamp(share, low, cap));
  }

  /// Whether `waiting` bytes reach reclaim_threshold(size, floor). Below the least
  /// that threshold can be, the answer needs no stream count: a synchronous
  /// allocation asks on every call.
  [[nodiscard]] bool worth_a_barrier(std::size_t waiting, std::size_t size,
                                     std::size_t floor = reclaim_floor) const noexcept {
    if (waiting < std::max(size, std::min(floor, least_reclaim_floor))) return false;
    return waiting >= reclaim_threshold(size, floor);
  }

  /// Driver calls a barrier would make now (stream_tracker::barrier_calls), at most
  /// `most`; `most` before the first growth (no device yet).
  [[nodiscard]] std::size_t barrier_cost(std::size_t most) const noexcept {
    auto const* t = tracker_.load(std::memory_order_acquire);
    if (t == nullptr) return most;
    return std::min(t->barrier_calls(), most);
  }

  /// Memory a barrier would make usable: pending frees, and for a synchronous
  /// request also what streams hold (a stream-ordered one reaches that with events).
  [[nodiscard]] std::size_t waiting_bytes(bool synchronous) {
    return lists_.pending_bytes() + (synchronous ? lists_.stream_bytes() : 0);
  }

  /// The last looks before out of memory: calls look() (which returns the memory
  /// or nullptr) again while other threads were moving free memory between lists
  /// during it (that memory is in no list for a moment; stream_free_lists::moves()),
  /// at most max_last_looks times. Caller holds growth_mutex().
  template <class Look>
  char* last_looks(Look&& look) {
    for (int n = 1;; ++n) {
      auto const before = lists_.moves();
      if (char* p = look()) return p;
      auto const after = lists_.moves();
      if (after.quiet_since(before) || n == max_last_looks) return nullptr;
      lists_.wait_for_moves(after);
    }
  }

  /// Gives every completely free region back upstream; the bytes given back.
  /// Caller holds growth_mutex().
  std::size_t release_free_regions() {
    return lists_.with_all_locked([&](typename lists_type::locked_view& v) {
      // A region's released pages count as free: they are in no list.
      auto const free = lists_.extract_free_regions(v, [&](char* base) {
        std::size_t const size = regions_.size_at(base);
        return std::pair<std::size_t, std::size_t>{size, size - released_in(base, size)};
      });
      std::size_t released = 0;
      end_borrows();
      for (auto const& r : free) {
        auto const pieces = regions_.pieces(r.base);  // an extended region goes back piece by piece
        std::size_t const unbacked = released_in(r.base, r.size);
        forget_released(r.base, r.size);  // first: a reader of committed_bytes() never sees the region twice gone
        [[maybe_unused]] std::size_t const size = regions_.erase(r.base);  // invalidates every thread's lookup hints
        GPUMEM_ASSERT(size == r.size, "a free region changed size while the lists were locked");
        for (auto const& [base, n] : pieces) upstream_->deallocate(base, n, stream_ref{r.stream});
        released += r.size - unbacked;
      }
      // Regions whose every page is released are in no list: no stream holds them.
      std::vector<char*> unbacked_regions;
      if (!released_.empty()) {
        regions_.for_each([&](char* base, std::size_t size) {
          if (released_in(base, size) == size) unbacked_regions.push_back(base);
        });
      }
      for (char* base : unbacked_regions) {
        auto const pieces = regions_.pieces(base);
        forget_released(base, regions_.size_at(base));
        regions_.erase(base);
        for (auto const& [b, n] : pieces) upstream_->deallocate(b, n, stream_ref{});
      }
      return released;
    });
  }

  /// Gives back the pieces at the end of extended regions (grow_joined) that a free
  /// block covers whole: a region that is never entirely free (a pool over one range
  /// of virtual addresses) still shrinks. Only blocks in the clean list (given back
  /// on the legacy stream, which the barrier that cleaned them ordered after every
  /// stream) or in a list of a stream this thread can name (given back on it).
  /// Caller holds growth_mutex(). Returns the bytes given back.
  std::size_t release_free_tails() {
    if constexpr (!requires(List & l, char* p) { l.bytes_ending_at(p); }) {
      return 0;
    } else {
      return lists_.with_all_locked([&](typename lists_type::locked_view& v) {
        std::size_t released = 0;
        for (auto const& [base, size] : regions_.extended()) {
          char* const end = base + size;
          for (entry* e : v.entries) {
            std::size_t const n = e->list.bytes_ending_at(end);
            if (n == 0) continue;
            // (without a driver nothing captures)
            bool const nameable = e->clean || (e->id.usable_from_this_thread() &&
                                               !(driver_available() && may_be_capturing(e->id.handle)));
            if (!nameable) break;
            CUstream const target = e->clean ? reinterpret_cast<CUstream>(legacy_stream_handle) : e->id.handle;
            char* const start = end - n;
            auto const cut = regions_.cut_pieces_from(base, start);
            if (cut.empty()) break;
            [[maybe_unused]] bool const removed = e->list.remove(start);
            GPUMEM_ASSERT(removed, "the free block at a region's end vanished while the lists were locked");
            if (cut.front().first > start) {
              e->list.add({start, static_cast<std::size_t>(cut.front().first - start), base});
            }
            end_borrows();
            for (auto const& [p, bytes] : cut) {
              upstream_->deallocate(p, bytes, stream_ref{target});
              released += bytes;
            }
            break;
          }
        }
        return released;
      });
    }
  }

  /// device_memory_resource::release(): reclaims whatever waits for a barrier (it
  /// may complete a free region), then gives the free regions back, and the free
  /// ends of extended ones.
  std::size_t release() {
    std::lock_guard growth{growth_mutex_};
    reclaim();
    std::size_t const whole = release_free_regions();
    return whole + release_free_tails();
  }

  resource_info info() {
    std::lock_guard growth{growth_mutex_};
    return info_locked();
  }

  /// info() for a caller holding growth_mutex() (so the reserved bytes are stable).
  resource_info info_locked() {
    resource_info r{};
    lists_.with_all_locked([&](typename lists_type::locked_view& v) {
      std::size_t free = v.quarantine.free_bytes();
      for (auto const* e : v.entries) {
        free += e->list.free_bytes();
        r.largest_free_block = std::max(r.largest_free_block, e->list.largest());
      }
      for (auto const& b : v.foreign) {
        free += b.list.free_bytes();
        r.largest_free_block = std::max(r.largest_free_block, b.list.largest());
      }
      // Pending blocks are free from the program's point of view (it freed them).
      r.pending_bytes = lists_.pending_bytes();
      peak_pending_ = std::max({peak_pending_, r.pending_bytes, lists_.peak_pending_estimate()});
      r.peak_pending_bytes = peak_pending_;
      r.released_bytes = released_bytes();
      free += r.pending_bytes;
      r.reserved_bytes = committed_bytes();  // released pages hold no device memory
      r.free_bytes = std::min(free, r.reserved_bytes);
      r.used_bytes = r.reserved_bytes - r.free_bytes;
    });
    return r;
  }

  /// p inside one of the regions, or memory the upstream owns (a caching upstream).
  [[nodiscard]] bool owns(void const* p) noexcept { return regions_.contains(p) || upstream_->owns(p); }

  void stream_destroyed(stream_ref s) noexcept {
    lists_.stream_destroyed(s);
    upstream_->stream_destroyed(s);
  }

 private:
  /// What grow() and grow_joined() share: one upstream allocation of `bytes` with
  /// synchronous semantics on the legacy stream, on the device the first growth
  /// resolves, then `record(base)` registers it and gives the result. R{} if the
  /// upstream is out of memory; if `record` throws, the memory goes back first.
  template <class R, class Record>
  R from_upstream(std::size_t bytes, Record&& record) {
    if (tracker_.load(std::memory_order_relaxed) == nullptr) {
      // The memory's device, whose streams a reclamation orders.
      if (int const device = current_device(); device >= 0) {
        tracker_.store(&stream_tracker::of(device), std::memory_order_release);
      }
    }
    end_borrows();  // the upstream may be a resource too
    void* raw = nullptr;
    {
      scoped_synchronous_call sync;
      try {
        raw = upstream_->allocate(bytes, stream_ref{});
      } catch (out_of_memory const&) { return R{}; }
    }
    if (raw == nullptr) return R{};
    try {
      return record(static_cast<char*>(raw));
    } catch (...) {
      scoped_synchronous_call sync;
      upstream_->deallocate(raw, bytes, stream_ref{});
      throw;
    }
  }

  device_memory_resource* const upstream_;
  /// The stream tracker of the memory's device; null until the first growth
  /// resolves it. Written under growth_mutex_, read without it (barrier_cost).
  std::atomic<stream_tracker*> tracker_;
  std::mutex growth_mutex_;                  ///< serialises growth, reclamation, release and info; outermost lock
  static constexpr int max_last_looks = 16;  ///< while moves keep interfering
  std::atomic<std::size_t> reclaims_{0};
  std::size_t peak_pending_ = 0;  ///< the most pending bytes seen at a reclamation or info(); under growth_mutex_
  struct released_range {
    std::size_t size{};
    char* region{};
  };
  std::map<char*, released_range> released_;    ///< released pages by start; under growth_mutex_
  std::atomic<std::size_t> released_bytes_{0};  ///< their sum, read without the lock
  region_table<Payload> regions_;
  lists_type lists_;
};

}  // namespace gpumem::detail
