#include "serve/release.hpp"

#include "serve/capture_guard.hpp"
#include "serve/device_chains.hpp"
#include "shim_state.hpp"

#include <gpumem/call_context.hpp>
#include <gpumem/config/resource_chain.hpp>
#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>
#include <gpumem/stream_tracker.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <ctime>

namespace gpumem::shim {
namespace {

constexpr auto relaxed = std::memory_order_relaxed;
constexpr std::size_t window_buckets = 16;

/// What a device's chain remembers between synchronizations and pool calls. Zero
/// means "nothing yet" everywhere, so the array needs no constructor.
struct device_release {
  /// The program's RELEASE_THRESHOLD for the device's default pool, when `program_set`.
  std::atomic<std::uint64_t> program_threshold{0};
  std::atomic<bool> program_set{false};
  /// The live bytes' high-water of the current interval before a restart that was
  /// not a synchronization (a reset of USED_MEM_HIGH): the interval's high-water is
  /// the larger of it and the live gauge's mark.
  std::atomic<std::int64_t> interval_carry{0};
  /// USED_MEM_HIGH before the live gauge's last mark restart (since the last reset).
  std::atomic<std::int64_t> used_high{0};
  /// A release that gave back less than release_slack (the cache sits in pages
  /// that blocks in use share, or in a resource that cannot trim): the device
  /// memory held and the live bytes then, plus one. Until the chain holds more or
  /// the program frees more, synchronizations do not try again (each try waits
  /// for the GPU). 0: no such release.
  std::atomic<std::int64_t> futile_held{0};
  std::atomic<std::int64_t> futile_live{0};
  /// The auto rule's window: the highest interval high-water ended in each of the
  /// last window_buckets spans of time (a span: window / (window_buckets - 1)
  /// seconds, at least one), and which span each bucket holds (its number + 1; 0:
  /// empty). Racing synchronizations may lose a raise: the rule is an estimate.
  std::array<std::atomic<std::int64_t>, window_buckets> window_span{};
  std::array<std::atomic<std::int64_t>, window_buckets> window_high{};
};

std::array<device_release, max_devices>& releases() noexcept {
  // Constant-initialised: synchronizations may come before any constructor ran.
  static constinit std::array<device_release, max_devices> r{};
  return r;
}

/// Each device's default memory pool once asked for (CUDA keeps it for the
/// device's life), and the device count.
std::array<std::atomic<CUmemoryPool>, max_devices>& default_pools() noexcept {
  static constinit std::array<std::atomic<CUmemoryPool>, max_devices> p{};
  return p;
}
constinit std::atomic<int> g_device_count{-1};

void raise(std::atomic<std::int64_t>& a, std::int64_t to) noexcept {
  auto seen = a.load(relaxed);
  while (to > seen && !a.compare_exchange_weak(seen, to, relaxed)) {}
}

std::uint64_t non_negative(std::int64_t v) noexcept { return v > 0 ? static_cast<std::uint64_t>(v) : 0; }

/// The auto rule's cached bytes to keep, given the interval's high-water of live
/// bytes and the live bytes now: what the program needed beyond what it still
/// holds, and a quarter more. The quarter is the pool's fragmentation: serving the
/// same requests again takes more free memory than their bytes (free space between
/// blocks in use fits only smaller ones). Without it a loop whose every step needs
/// the same memory had its pages unmapped at each synchronization and mapped again
/// in the next step (a simulated loop of mixed sizes: 4 of 59 pages each step;
/// its pool needed 1.07x its live high-water).
std::uint64_t auto_keep(std::int64_t high, std::int64_t live) noexcept {
  std::uint64_t const need = non_negative(high - live);
  return need + need / 4;
}

/// Seconds on a coarse monotonic clock (the vDSO's: no system call).
std::int64_t now_s() noexcept {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return static_cast<std::int64_t>(t.tv_sec);
}

/// Files the high-water of an interval that ended now in the device's window (if
/// `file`) and returns the highest one the window holds, `high` included. A window
/// of 0 seconds holds only the interval that just ended.
std::int64_t window_high(device_release& r, std::int64_t high, std::uint32_t window, bool file = true) noexcept {
  if (window == 0) return high;
  std::int64_t const width = std::max<std::int64_t>(1, (window + window_buckets - 2) / (window_buckets - 1));
  std::int64_t const span = now_s() / width + 1;  // never 0
  auto const slot = static_cast<std::size_t>(span) % window_buckets;
  if (file && r.window_span[slot].load(relaxed) != span) {
    r.window_high[slot].store(high, relaxed);
    r.window_span[slot].store(span, relaxed);
  } else if (file) {
    raise(r.window_high[slot], high);
  }
  std::int64_t const oldest = span - (window + width - 1) / width;  // spans that end within the window
  std::int64_t out = high;
  for (std::size_t i = 0; i < window_buckets; ++i) {
    if (r.window_span[i].load(relaxed) >= oldest) out = std::max(out, r.window_high[i].load(relaxed));
  }
  return out;
}

/// The device's threshold: the program's, else the configured one.
config::release_rule rule_of(device_release const& r) noexcept {
  if (r.program_set.load(std::memory_order_acquire))
    return config::release_rule::keep(r.program_threshold.load(relaxed));
  return state().settings.release_threshold;
}

/// The auto rule's high-water of the live bytes in the interval that ends now; the
/// next interval starts from the live bytes now. USED_MEM_HIGH keeps what the
/// ended interval saw.
std::int64_t end_interval(device_release& r, statistics_resource_adaptor& live) noexcept {
  std::int64_t const mark = live.reset_bytes_mark();
  raise(r.used_high, mark);
  std::int64_t high = mark;
  if (r.interval_carry.load(relaxed) != 0) high = std::max(high, r.interval_carry.exchange(0, relaxed));
  return high;
}

/// Out of line: the rare path of a synchronization that gives memory back.
GPUMEM_COLD void release_cached(device_chain& c, device_release& r, std::uint64_t keep, std::int64_t held,
                                std::int64_t live) noexcept {
  std::size_t released = 0;
  if (!trim_chain(c, keep, released, "synchronize")) return;
  if (released < release_slack) {
    r.futile_held.store(held + 1, relaxed);
    r.futile_live.store(live + 1, relaxed);
  } else {
    r.futile_held.store(0, relaxed);
  }
  message(level::debug, "device %d: gave back %zu bytes at a synchronization (%llu cached bytes stay)", c.device,
          released, static_cast<unsigned long long>(keep));
}

/// The chain of `device` when gpumem serves its allocations and has built it.
device_chain* served_chain(int device) noexcept { return active() ? built_chain(device) : nullptr; }

}  // namespace

void release_at_sync() noexcept {
  // A release waits for the GPU, which would break a capture.
  if (stream_tracker::capture_active()) return;
  CUcontext ctx = nullptr;
  device_chain* const c = built_chain(current_device(ctx));
  if (c == nullptr) return;
  auto& r = releases()[static_cast<std::size_t>(c->device)];
  config::release_rule const rule = rule_of(r);
  if (!rule.automatic && rule.bytes == config::release_rule::never) return;
  auto& live_stats = c->chain->live_stats();
  // Lock-free estimates (exact with one allocating thread; below a pool the
  // device's is exact): a threshold needs no more.
  std::int64_t const live = live_stats.current_bytes_estimate();
  std::int64_t const held = c->chain->device_stats().current_bytes_estimate();
  std::uint64_t const keep = rule.automatic
                                 ? auto_keep(window_high(r, end_interval(r, live_stats), rule.window_s), live)
                                 : rule.bytes;
  std::uint64_t const cached = non_negative(held - live);
  if (cached <= keep || cached - keep <= release_slack) return;
  // The last try found nothing to give back, and nothing changed that could.
  if (std::int64_t const f = r.futile_held.load(relaxed);
      f != 0 && held < f && live + static_cast<std::int64_t>(release_slack) >= r.futile_live.load(relaxed)) {
    return;
  }
  release_cached(*c, r, keep, held, live);
}

bool trim_chain(device_chain& c, std::size_t keep, std::size_t& released, const char* entry) noexcept {
  released = 0;
  if (stream_tracker::capture_active()) return false;
  try {
    scoped_chain_context in_chain{c};
    if (!in_chain.ok()) return false;
    scoped_relaxed_capture relaxed_mode;  // a capture beginning meanwhile in another thread stays valid
    scoped_call_context call{entry, c.device};
    released = c.chain->top().trim(keep);
    return true;
  } catch (std::exception const& e) {
    message(level::warn, "device %d: giving cached memory back failed: %s", c.device, e.what());
  } catch (...) { message(level::warn, "device %d: giving cached memory back failed", c.device); }
  return false;
}

int default_pool_device(CUmemoryPool pool) noexcept {
  if (pool == nullptr || !active()) return -1;
  // The chains know theirs.
  for (int d = 0; d < max_devices; ++d) {
    if (device_chain const* c = built_chain(d); c != nullptr && c->default_pool == pool) return d;
  }
  auto const& drv = detail::driver();
  if (drv.cuDeviceGetDefaultMemPool == nullptr) return -1;
  int count = g_device_count.load(std::memory_order_acquire);
  if (count < 0) {
    if (drv.cuDeviceGetCount == nullptr || drv.cuDeviceGetCount(&count) != CUDA_SUCCESS) return -1;
    count = std::min(count, max_devices);
    g_device_count.store(count, std::memory_order_release);
  }
  auto& pools = default_pools();
  for (int d = 0; d < count; ++d) {
    auto& slot = pools[static_cast<std::size_t>(d)];
    CUmemoryPool p = slot.load(std::memory_order_acquire);
    if (p == nullptr) {
      if (drv.cuDeviceGetDefaultMemPool(&p, static_cast<CUdevice>(d)) != CUDA_SUCCESS) continue;
      slot.store(p, std::memory_order_release);
    }
    if (p == pool) return d;
  }
  return -1;
}

void trim_default_pool(CUmemoryPool pool, std::size_t keep, const char* entry) noexcept {
  int const d = default_pool_device(pool);
  device_chain* const c = d >= 0 ? built_chain(d) : nullptr;
  if (c == nullptr) return;
  std::size_t released = 0;
  if (trim_chain(*c, keep, released, entry)) {
    message(level::debug, "device %d: %s gave back %zu bytes", d, entry, released);
  }
}

void add_pool_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) noexcept {
  if (value == nullptr) return;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: break;
    default: return;
  }
  int const d = default_pool_device(pool);
  if (d < 0) return;
  auto& out = *static_cast<cuuint64_t*>(value);
  auto& r = releases()[static_cast<std::size_t>(d)];
  device_chain* const c = served_chain(d);
  if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
    config::release_rule const rule = rule_of(r);
    if (!rule.automatic) {
      out = rule.bytes;
    } else {
      // What the next synchronization would keep cached.
      out = 0;
      if (c != nullptr) {
        auto& live = c->chain->live_stats();
        std::int64_t const high = std::max(live.bytes_mark(), r.interval_carry.load(relaxed));
        out = auto_keep(window_high(r, high, rule.window_s, /*file=*/false), live.current_bytes_estimate());
      }
    }
    return;
  }
  if (c == nullptr) return;  // the chain holds nothing yet
  // Exact values (bytes() sums over the threads under a lock): a query, not a hot path.
  auto& held = c->chain->device_stats();
  auto& live = c->chain->live_stats();
  std::int64_t mine = 0;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: mine = held.bytes().current; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: mine = std::max(held.bytes_mark(), held.bytes().current); break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: mine = live.bytes().current; break;
    default: mine = std::max({r.used_high.load(relaxed), live.bytes_mark(), live.bytes().current}); break;
  }
  out += non_negative(mine);
}

void note_pool_attribute_set(CUmemoryPool pool, CUmemPool_attribute attr, void const* value) noexcept {
  if (value == nullptr) return;
  if (attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD && attr != CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH &&
      attr != CU_MEMPOOL_ATTR_USED_MEM_HIGH) {
    return;
  }
  int const d = default_pool_device(pool);
  if (d < 0) return;
  auto& r = releases()[static_cast<std::size_t>(d)];
  if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
    r.program_threshold.store(*static_cast<cuuint64_t const*>(value), relaxed);
    r.program_set.store(true, std::memory_order_release);
    r.futile_held.store(0, relaxed);
    return;
  }
  device_chain* const c = served_chain(d);
  if (c == nullptr) return;  // nothing held yet: the highs are 0 already
  if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) {
    (void)c->chain->device_stats().reset_bytes_mark();
    return;
  }
  // USED_MEM_HIGH restarts from the live bytes now; the auto rule's interval keeps
  // what it saw so far.
  raise(r.interval_carry, c->chain->live_stats().reset_bytes_mark());
  r.used_high.store(0, relaxed);
}

void forget_release_state(int device) noexcept {
  if (device < 0 || device >= max_devices) return;
  auto& r = releases()[static_cast<std::size_t>(device)];
  r.program_set.store(false, relaxed);
  r.program_threshold.store(0, relaxed);
  r.interval_carry.store(0, relaxed);
  r.used_high.store(0, relaxed);
  r.futile_held.store(0, relaxed);
  r.futile_live.store(0, relaxed);
  for (auto& s : r.window_span) s.store(0, relaxed);
}

void reset_release_after_fork() noexcept {
  for (int d = 0; d < max_devices; ++d) forget_release_state(d);
  for (auto& p : default_pools()) p.store(nullptr, relaxed);
  g_device_count.store(-1, relaxed);
}

}  // namespace gpumem::shim
