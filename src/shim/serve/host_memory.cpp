#include "serve/host_memory.hpp"

#include "observe/event_log.hpp"
#include "shim_state.hpp"

#include <gpumem/call_context.hpp>
#include <gpumem/config/size_parse.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/limiting_resource_adaptor.hpp>
#include <gpumem/pinned_pools_memory_resource.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>

#include <fmt/format.h>

namespace gpumem::shim {
namespace {

struct host_chain {
  std::unique_ptr<pinned_pools_memory_resource> pools;
  std::unique_ptr<limiting_resource_adaptor> limit;
  std::unique_ptr<statistics_resource_adaptor> stats;
  device_memory_resource* top = nullptr;
  std::string description;
  std::mutex mutex;                                   // guards `live`
  std::unordered_map<void const*, std::size_t> live;  // handed out -> requested bytes
  std::atomic<std::uint64_t> allocations{0}, frees{0}, passthroughs{0};
};

std::atomic<host_chain*> g_host{nullptr};
std::mutex g_build_mutex;

// The chain, built on first use; nullptr when the host path is off or could not
// be built (no host memory).
host_chain* chain() noexcept {
  if (host_chain* c = g_host.load(std::memory_order_acquire)) [[likely]] { return c; }
  std::lock_guard lock{g_build_mutex};
  if (host_chain* c = g_host.load(std::memory_order_acquire)) return c;
  auto const& hs = state().settings.host;
  try {
    auto c = std::make_unique<host_chain>();
    pinned_pool_options const opts{.maximum_size = hs.pool_max, .wait_for_gpu = safe_mode()};
    c->pools = std::make_unique<pinned_pools_memory_resource>(opts, hs.pool);
    c->top = c->pools.get();
    c->description = hs.pool ? "pinned pool per flag set and device" : "pinned (no pool)";
    if (hs.pool_max) c->description += ", max " + config::format_bytes(*hs.pool_max);
    if (hs.limit) {
      c->limit = std::make_unique<limiting_resource_adaptor>(c->top, *hs.limit);
      c->top = c->limit.get();
      c->description = "limiting(" + config::format_bytes(*hs.limit) + ") → " + c->description;
    }
    c->stats = std::make_unique<statistics_resource_adaptor>(c->top);
    c->top = c->stats.get();
    g_host.store(c.release(), std::memory_order_release);  // never destroyed: frees may come during exit
  } catch (std::exception const&) { return nullptr; }
  return g_host.load(std::memory_order_acquire);
}

int device_now() noexcept {
  CUcontext ctx = nullptr;
  auto const& d = detail::driver();
  if (d.init_result != CUDA_SUCCESS || d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) return -1;
  return detail::current_device();
}

}  // namespace

CUresult host_allocate(void** out, std::size_t bytes, unsigned flags, const char* entry) noexcept {
  auto const start = event_clock();
  host_chain* c = chain();
  if (c == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUresult r = CUDA_SUCCESS;
  void* p = nullptr;
  int device = -1;
  {
    scoped_call_context call{entry, -1, safe_mode()};
    scoped_pinned_flags with{flags};
    try {
      p = c->top->allocate(bytes);
    } catch (gpumem::bad_alloc const& e) { r = e.code(); } catch (cuda_error const& e) {
      r = e.code();
    } catch (std::bad_alloc const&) { r = CUDA_ERROR_OUT_OF_MEMORY; } catch (std::exception const&) {
      r = CUDA_ERROR_UNKNOWN;
    }
    device = device_now();
  }
  if (r == CUDA_SUCCESS) {
    try {
      std::lock_guard lock{c->mutex};
      c->live.emplace(p, bytes);
    } catch (std::exception const&) {
      c->top->deallocate(p, bytes);
      r = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (r == CUDA_SUCCESS) {
    c->allocations.fetch_add(1, std::memory_order_relaxed);
    *out = p;
    message(level::trace, "%s: %zu bytes, flags %#x, from the host chain: %p", entry, bytes, flags, p);
    log_event(event_row(log_action::allocate, p, bytes, nullptr, device, entry, r), start);
  } else {
    log_event(event_row(log_action::allocate_failure, nullptr, bytes, nullptr, device, entry, r), start);
  }
  return r;
}

host_free_result host_free(void* p, const char* entry) noexcept {
  host_chain* c = g_host.load(std::memory_order_acquire);
  if (c == nullptr) return host_free_result::not_ours;
  auto const start = event_clock();
  std::size_t bytes = 0;
  {
    std::lock_guard lock{c->mutex};
    auto it = c->live.find(p);
    if (it == c->live.end()) {
      // A pointer into memory the pools hold that is not a live allocation: a second
      // free or an interior pointer. CUDA refuses those; handing it to CUDA could
      // free a cached block under the pool.
      if (!c->pools->owns(p)) return host_free_result::not_ours;
      log_event(event_row(log_action::free, p, 0, nullptr, device_now(), entry, CUDA_ERROR_INVALID_VALUE), start);
      return host_free_result::refused;
    }
    bytes = it->second;
    c->live.erase(it);
  }
  {
    scoped_call_context call{entry, -1, safe_mode()};
    c->top->deallocate(p, bytes);
  }
  c->frees.fetch_add(1, std::memory_order_relaxed);
  message(level::trace, "%s: %p (%zu bytes) back to the host chain", entry, p, bytes);
  log_event(event_row(log_action::free, p, bytes, nullptr, device_now(), entry, CUDA_SUCCESS), start);
  return host_free_result::freed;
}

void note_host_passthrough(bool allocation, void* p, std::size_t bytes, const char* entry, CUresult r) noexcept {
  if (host_chain* c = g_host.load(std::memory_order_acquire)) c->passthroughs.fetch_add(1, std::memory_order_relaxed);
  log_action const a = !allocation         ? log_action::free
                       : r == CUDA_SUCCESS ? log_action::allocate
                                           : log_action::allocate_failure;
  log_event(event_row(a, p, bytes, nullptr, device_now(), entry, r), event_clock());
}

host_totals host_chain_totals() noexcept {
  host_totals t;
  host_chain* c = g_host.load(std::memory_order_acquire);
  if (c == nullptr) return t;
  t.built = true;
  t.pooled = state().settings.host.pool;
  t.allocations = c->allocations.load(std::memory_order_relaxed);
  t.frees = c->frees.load(std::memory_order_relaxed);
  t.passthroughs = c->passthroughs.load(std::memory_order_relaxed);
  t.fences = c->pools->fence_count();
  t.waits = c->pools->wait_count();
  try {
    t.info = c->top->info();
    t.description = c->description;
  } catch (std::exception const&) { t.description.clear(); }
  return t;
}

}  // namespace gpumem::shim

namespace gpumem::shim {

void reset_host_after_fork() noexcept {
  g_host.store(nullptr, std::memory_order_relaxed);  // the parent's: unusable here, never freed
  new (&g_build_mutex) std::mutex{};                 // another parent thread may have held it
}

void append_host_report(std::string& out) {
  host_totals const t = host_chain_totals();
  if (!t.built) return;
  auto const b = [](std::uint64_t n) { return config::format_bytes(n); };
  out += fmt::format("host (pinned): {}\n", t.description);
  out += fmt::format("  allocations {}  frees {}  passed to CUDA {}\n", t.allocations, t.frees, t.passthroughs);
  out += fmt::format("  now live {}  reserved {}  cached {}  waiting for the GPU {} (peak {})\n", b(t.info.used_bytes),
                     b(t.info.reserved_bytes), b(t.info.free_bytes), b(t.info.pending_bytes),
                     b(t.info.peak_pending_bytes));
  out += fmt::format("  fences {}  host waits for the GPU {}\n", t.fences, t.waits);
}

}  // namespace gpumem::shim
