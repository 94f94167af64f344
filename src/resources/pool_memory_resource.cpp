#include <gpumem/pool_memory_resource.hpp>

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/free_list.hpp>
#include <gpumem/detail/stream_free_lists.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>

namespace gpumem {
namespace {

constexpr std::size_t align_down(std::size_t v, std::size_t a) noexcept { return v & ~(a - 1); }

/// Largest request any pool can accept: align_up of anything larger overflows.
constexpr std::size_t largest_request = align_down(std::numeric_limits<std::size_t>::max(), allocation_alignment);

std::size_t half_of_free_device_memory() {
  GPUMEM_CU_TRY(detail::ensure_context());
  std::size_t free = 0;
  std::size_t total = 0;
  GPUMEM_CU_TRY(detail::driver().cuMemGetInfo(&free, &total));
  return align_down(free / 2, allocation_alignment);
}

std::string mib(std::size_t bytes) {
  return std::to_string(bytes) + " B (" + std::to_string(bytes >> 20) + " MiB)";
}

}  // namespace

struct pool_memory_resource::impl {
  using lists_type = detail::stream_free_lists<detail::coalescing_free_list>;
  using entry = lists_type::entry;
  using gather_mode = lists_type::gather_mode;

  impl(device_memory_resource* up, pool_options const& o) : upstream{up}, opts{o} {
    if (upstream == nullptr) throw logic_error{"gpumem: pool_memory_resource needs an upstream resource"};
    maximum = align_down(std::min(opts.maximum_size.value_or(largest_request), largest_request), allocation_alignment);
    if (opts.initial_size && opts.maximum_size && *opts.initial_size > *opts.maximum_size) {
      throw logic_error{"gpumem: pool initial_size (" + std::to_string(*opts.initial_size) +
                        ") is larger than maximum_size (" + std::to_string(*opts.maximum_size) + ")"};
    }
    min_growth = align_up(std::max(opts.min_growth, allocation_alignment), allocation_alignment);
  }

  ~impl() {
    // Everything goes back, in use or not (RMM does the same): the pool owns its slabs.
    for (auto const& [base, size] : slabs) upstream->deallocate(base, size, stream_ref{});
  }

  void reserve_initial() {
    std::size_t const initial = opts.initial_size ? align_up(std::min(*opts.initial_size, largest_request), allocation_alignment)
                                                  : std::min(half_of_free_device_memory(), maximum);
    if (initial == 0) return;
    if (initial > maximum) {
      throw logic_error{"gpumem: pool initial_size rounds up past maximum_size"};
    }
    std::lock_guard growth{growth_mutex};
    auto const e = lists.get(stream_ref{});
    char* base = grow(initial, stream_ref{});
    if (base == nullptr) {
      throw out_of_memory{"gpumem: pool_memory_resource could not reserve its initial " + mib(initial) + " from upstream"};
    }
    e->grown += initial;
    std::lock_guard lock{e->mutex};
    e->list.insert({base, initial, base});
  }

  void* allocate(std::size_t bytes, stream_ref s) {
    if (bytes == 0) return nullptr;
    if (bytes > maximum) {
      throw out_of_memory{"gpumem: pool_memory_resource: request of " + std::to_string(bytes) +
                          " bytes exceeds the pool's maximum size of " + std::to_string(maximum) + " bytes"};
    }
    std::size_t const size = align_up(bytes, allocation_alignment);
    if (char* p = take(lists.borrow(s), size)) return p;  // the hit path: no refcount traffic
    auto const e = lists.get(s);  // owned from here: growing calls the upstream
    if (lists.gather_into(*e, size, gather_mode::first_fit)) {
      if (char* p = take(*e, size)) return p;
    }
    return grow_and_take(*e, size, s);
  }

  void deallocate(void* ptr, std::size_t bytes, stream_ref s) noexcept {
    if (ptr == nullptr || bytes == 0 || bytes > largest_request) return;
    auto* p = static_cast<char*>(ptr);
    std::size_t const size = align_up(bytes, allocation_alignment);
    auto const found = find_slab(p);
    if (!found) return;  // not ours
    auto const [slab, slab_size] = *found;
    auto const offset = reinterpret_cast<std::uintptr_t>(p) - reinterpret_cast<std::uintptr_t>(slab);
    if (size > slab_size - offset) return;  // runs past its slab: a wrong size
    try {
      auto& e = lists.borrow(s);  // nothing below re-enters a resource
      std::lock_guard lock{e.mutex};
      // false: overlaps a free block (a double free); ignored, the pool stays consistent.
      static_cast<void>(e.list.insert({p, size, slab}));
    } catch (...) {
      // Out of host memory for the bookkeeping: the block is lost to the pool (never corrupts it).
    }
  }

  /// The slab holding p. The calling thread's last answer is cached: slabs only
  /// leave under slabs_generation, so the common case takes no lock.
  std::optional<std::pair<char*, std::size_t>> find_slab(char* p) {
    struct hint {
      std::uint64_t instance{};
      std::uint64_t generation{};
      char* base{};
      std::size_t size{};
    };
    thread_local std::array<hint, detail::thread_cache_slots> hints{};
    auto& h = hints[instance % detail::thread_cache_slots];
    auto const generation = slabs_generation.load(std::memory_order_acquire);  // before the lookup
    auto const inside = [p](char* base, std::size_t size) {
      auto const at = reinterpret_cast<std::uintptr_t>(p);
      auto const b = reinterpret_cast<std::uintptr_t>(base);
      return at >= b && at - b < size;
    };
    if (h.instance == instance && h.generation == generation && inside(h.base, h.size)) {
      return std::pair{h.base, h.size};
    }
    std::shared_lock lock{slabs_mutex};
    auto it = slabs.upper_bound(p);
    if (it == slabs.begin()) return std::nullopt;
    --it;
    if (!inside(it->first, it->second)) return std::nullopt;
    h = {instance, generation, it->first, it->second};
    return std::pair{it->first, it->second};
  }

  std::size_t release() {
    std::lock_guard growth{growth_mutex};
    return release_free_slabs();
  }

  resource_info info() {
    std::lock_guard growth{growth_mutex};
    return info_locked();
  }

  /// Caller holds growth_mutex (so reserved is stable).
  resource_info info_locked() {
    resource_info r{};
    lists.with_all_locked([&](lists_type::locked_view& v) {
      std::size_t free = v.quarantine.total_bytes();
      for (auto const* e : v.entries) {
        free += e->list.total_bytes();
        r.largest_free_block = std::max(r.largest_free_block, e->list.largest());
      }
      for (auto const& b : v.foreign) {
        free += b.list.total_bytes();
        r.largest_free_block = std::max(r.largest_free_block, b.list.largest());
      }
      r.reserved_bytes = reserved.load(std::memory_order_relaxed);
      r.free_bytes = std::min(free, r.reserved_bytes);
      r.used_bytes = r.reserved_bytes - r.free_bytes;
    });
    return r;
  }

  /// Best fit from the stream's own list.
  static char* take(entry& e, std::size_t size) {
    std::lock_guard lock{e.mutex};
    auto const b = e.list.take_best_fit(size);
    return b ? b->ptr : nullptr;
  }

  /// The miss path: grow geometrically; if the upstream is out of memory (or the
  /// maximum is reached), take everything other streams hold, give fully free
  /// slabs back and retry the smallest sufficient growth.
  ///
  /// The geometric step is what this stream has grown so far (at most the pool
  /// size): each stream's share doubles with its own demand. Doubling the whole
  /// pool on every stream's miss would multiply memory by the number of streams.
  char* grow_and_take(entry& e, std::size_t size, stream_ref s) {
    std::lock_guard growth{growth_mutex};
    if (char* p = take(e, size)) return p;  // another thread on this stream grew meanwhile

    std::size_t const share = std::min(e.grown, reserved.load(std::memory_order_relaxed));
    std::size_t const geometric = growth_step(size, std::max(min_growth, share));
    std::size_t const modest = growth_step(size, min_growth);
    if (geometric != 0) {
      if (char* base = grow(geometric, s)) return carve(e, base, geometric, size);
    }
    if (modest != 0 && modest != geometric) {
      if (char* base = grow(modest, s)) return carve(e, base, modest, size);
    }
    if (lists.gather_into(e, size, gather_mode::everything)) {
      if (char* p = take(e, size)) return p;
    }
    release_free_slabs();
    if (char* p = take(e, size)) return p;
    if (reserved.load(std::memory_order_relaxed) + size <= maximum) {
      if (char* base = grow(size, s)) return carve(e, base, size, size);
    }
    auto const i = info_locked();
    throw out_of_memory{"gpumem: pool_memory_resource out of memory: requested " + mib(size) + ", pool reserved " +
                        mib(i.reserved_bytes) + ", free " + mib(i.free_bytes) + ", largest free block " +
                        mib(i.largest_free_block) +
                        (opts.maximum_size ? ", maximum " + mib(maximum) : std::string{", no maximum"})};
  }

  /// max(size, preferred) clamped to what the maximum still allows; 0 if not even `size` fits.
  [[nodiscard]] std::size_t growth_step(std::size_t size, std::size_t preferred) const noexcept {
    std::size_t const room = maximum - std::min(maximum, reserved.load(std::memory_order_relaxed));
    if (room < size) return 0;
    return std::min(align_up(std::max(size, preferred), allocation_alignment), room);
  }

  /// A new slab of `bytes` from the upstream on stream s, registered; nullptr if
  /// the upstream is out of memory. Caller holds growth_mutex.
  char* grow(std::size_t bytes, stream_ref s) {
    void* raw = nullptr;
    try {
      raw = upstream->allocate(bytes, s);
    } catch (out_of_memory const&) {
      return nullptr;
    }
    if (raw == nullptr) return nullptr;
    auto* base = static_cast<char*>(raw);
    try {
      std::unique_lock lock{slabs_mutex};
      slabs.emplace(base, bytes);
    } catch (...) {
      upstream->deallocate(raw, bytes, s);
      throw;
    }
    reserved.fetch_add(bytes, std::memory_order_relaxed);
    return base;
  }

  /// Hands out the front of a new slab and files the rest under the stream.
  /// Caller holds growth_mutex.
  static char* carve(entry& e, char* base, std::size_t slab_size, std::size_t size) {
    e.grown += slab_size;
    if (slab_size > size) {
      std::lock_guard lock{e.mutex};
      e.list.insert({base + size, slab_size - size, base});
    }
    return base;
  }

  /// Returns fully free slabs upstream. Caller holds growth_mutex.
  std::size_t release_free_slabs() {
    return lists.with_all_locked([&](lists_type::locked_view& v) {
      auto const regions = lists.extract_free_regions(v, [&](char* base) {
        std::shared_lock lock{slabs_mutex};
        auto it = slabs.find(base);
        return it == slabs.end() ? std::size_t{0} : it->second;
      });
      std::size_t released = 0;
      for (auto const& r : regions) {
        {
          std::unique_lock lock{slabs_mutex};
          slabs.erase(r.base);
          slabs_generation.fetch_add(1, std::memory_order_release);  // invalidates find_slab hints
        }
        reserved.fetch_sub(r.size, std::memory_order_relaxed);
        upstream->deallocate(r.base, r.size, stream_ref{r.stream});
        released += r.size;
      }
      return released;
    });
  }

  // Lock order, outermost first: growth_mutex -> the stream table, one stream's
  // mutex (all of them, ascending, in release/info), the foreign batches (see
  // stream_free_lists.hpp) -> slabs_mutex, a leaf. allocate and deallocate take
  // growth_mutex only to grow; deallocate reads slabs under a shared lock.
  device_memory_resource* const upstream;
  pool_options const opts;
  std::size_t maximum{};     ///< opts.maximum_size rounded down to 256, or the largest request
  std::size_t min_growth{};  ///< opts.min_growth rounded up to 256

  std::mutex growth_mutex;  ///< serialises growth, release and info; outermost lock
  std::atomic<std::size_t> reserved{0};
  std::uint64_t const instance = detail::next_instance_id();
  std::shared_mutex slabs_mutex;       ///< leaf lock: readers in deallocate, writers under growth_mutex
  std::map<char*, std::size_t> slabs;  ///< slab base -> size
  std::atomic<std::uint64_t> slabs_generation{0};  ///< bumped whenever a slab leaves
  lists_type lists;
};

pool_memory_resource::pool_memory_resource(device_memory_resource* upstream, pool_options opts)
    : impl_{std::make_unique<impl>(upstream, opts)} {
  impl_->reserve_initial();
}

pool_memory_resource::~pool_memory_resource() = default;

device_memory_resource* pool_memory_resource::upstream() const noexcept { return impl_->upstream; }
std::size_t pool_memory_resource::pool_size() const noexcept {
  return impl_->reserved.load(std::memory_order_relaxed);
}
pool_options const& pool_memory_resource::options() const noexcept { return impl_->opts; }

void* pool_memory_resource::do_allocate(std::size_t bytes, stream_ref stream) { return impl_->allocate(bytes, stream); }
void pool_memory_resource::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  impl_->deallocate(p, bytes, stream);
}
std::size_t pool_memory_resource::do_release() { return impl_->release(); }
resource_info pool_memory_resource::do_info() const { return impl_->info(); }
void pool_memory_resource::do_stream_destroyed(stream_ref stream) noexcept {
  impl_->lists.stream_destroyed(stream);
  impl_->upstream->stream_destroyed(stream);
}

}  // namespace gpumem
