#include "serve/process_chains.hpp"

#include "shim_state.hpp"

#include <gpumem/call_context.hpp>
#include <gpumem/config/size_parse.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/limiting_resource_adaptor.hpp>
#include <gpumem/per_flag_pools_memory_resource.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <new>

#include <fmt/format.h>

namespace gpumem::shim {
namespace {

struct process_chain {
  std::unique_ptr<per_flag_pools_memory_resource> pools;
  std::unique_ptr<limiting_resource_adaptor> limit;
  std::unique_ptr<statistics_resource_adaptor> stats;
  device_memory_resource* top = nullptr;
  std::string description;
  std::atomic<std::uint64_t> allocations{0}, frees{0}, passthroughs{0};
};

std::array<std::atomic<process_chain*>, 2> g_chains{};
std::mutex g_build_mutex;

std::size_t index(process_memory which) noexcept { return static_cast<std::size_t>(which); }

config::process_chain_settings const& settings_of(process_memory which) noexcept {
  return which == process_memory::pinned ? state().settings.host : state().settings.managed;
}

process_chain* built(process_memory which) noexcept { return g_chains[index(which)].load(std::memory_order_acquire); }

// The chain, built on first use; nullptr when it could not be built (no host memory).
process_chain* chain(process_memory which) noexcept {
  if (process_chain* c = built(which)) [[likely]] { return c; }
  std::lock_guard lock{g_build_mutex};
  if (process_chain* c = built(which)) return c;
  auto const& cs = settings_of(which);
  bool const pinned = which == process_memory::pinned;
  try {
    auto c = std::make_unique<process_chain>();
    pinned_pool_options const opts{.maximum_size = cs.pool_max, .wait_for_gpu = safe_mode()};
    c->pools = std::make_unique<per_flag_pools_memory_resource>(
        pinned ? host_accessible_kind::pinned : host_accessible_kind::managed, opts, cs.pool);
    c->top = c->pools.get();
    c->description = cs.pool
                         ? (pinned ? "pinned pool per flag set and device" : "managed pool per attach flag and device")
                         : (pinned ? "pinned (no pool)" : "managed (no pool)");
    if (cs.pool_max) c->description += ", max " + config::format_bytes(*cs.pool_max);
    if (cs.limit) {
      c->limit = std::make_unique<limiting_resource_adaptor>(c->top, *cs.limit);
      c->top = c->limit.get();
      c->description = "limiting(" + config::format_bytes(*cs.limit) + ") → " + c->description;
    }
    c->stats = std::make_unique<statistics_resource_adaptor>(c->top);
    c->top = c->stats.get();
    g_chains[index(which)].store(c.release(), std::memory_order_release);  // never destroyed
  } catch (std::exception const&) { return nullptr; }
  return built(which);
}

// The device of the calling thread's current context; -1 when none is current
// (a process chain's rows name it).
int current_context_device() noexcept {
  CUcontext ctx = nullptr;
  auto const& d = detail::driver();
  if (d.init_result != CUDA_SUCCESS || d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) return -1;
  return detail::current_device();
}

}  // namespace

CUresult process_allocate(process_memory which, void** out, std::size_t bytes, unsigned flags, int device,
                          const char* entry) noexcept {
  process_chain* c = chain(which);
  if (c == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUresult r = CUDA_SUCCESS;
  {
    scoped_call_context call{entry, -1, safe_mode()};
    scoped_alloc_flags with{flags, device};
    try {
      *out = c->top->allocate(bytes);
    } catch (gpumem::bad_alloc const& e) { r = e.code(); } catch (cuda_error const& e) {
      r = e.code();
    } catch (std::bad_alloc const&) { r = CUDA_ERROR_OUT_OF_MEMORY; } catch (std::exception const&) {
      r = CUDA_ERROR_UNKNOWN;
    }
  }
  if (r == CUDA_SUCCESS) c->allocations.fetch_add(1, std::memory_order_relaxed);
  return r;
}

void process_deallocate(process_memory which, void* p, std::size_t bytes, const char* entry) noexcept {
  process_chain* c = built(which);
  if (c == nullptr) return;  // never handed anything out
  {
    scoped_call_context call{entry, -1, safe_mode()};
    c->top->deallocate(p, bytes);
  }
  c->frees.fetch_add(1, std::memory_order_relaxed);
}

bool process_chain_owns(process_memory which, void const* p) noexcept {
  process_chain* c = built(which);
  return c != nullptr && c->pools->owns(p);
}

void count_process_passthrough(process_memory which) noexcept {
  if (process_chain* c = built(which)) c->passthroughs.fetch_add(1, std::memory_order_relaxed);
}

process_totals process_chain_totals(process_memory which) noexcept {
  process_totals t;
  process_chain* c = built(which);
  if (c == nullptr) return t;
  t.built = true;
  t.pooled = c->pools->pooled();
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

std::int64_t process_chain_reserved(process_memory which) noexcept {
  process_chain* c = built(which);
  if (c == nullptr) return 0;
  try {
    return static_cast<std::int64_t>(c->top->info().reserved_bytes);
  } catch (std::exception const&) { return -1; }  // unknown: the device's figure then
}

void log_process_event(process_memory which, log_action action, void const* p, std::size_t bytes, CUstream stream,
                       int device, const char* entry, CUresult r, event_start start) noexcept {
  unsigned const needs = event_needs_now();
  if ((needs & (needs_row | needs_stack)) == 0) return;
  if (device < 0) device = current_context_device();
  log_row row = event_row(action, p, bytes, stream, device, entry, r);
  if ((needs & needs_row) != 0) row.reserved = process_chain_reserved(which);
  record_event(row, start);
}

void append_process_chain_reports(std::string& out) {
  auto const b = [](std::uint64_t n) { return config::format_bytes(n); };
  for (process_memory const which : {process_memory::pinned, process_memory::managed}) {
    process_totals const t = process_chain_totals(which);
    if (!t.built) continue;
    out += fmt::format("{}: {}\n", which == process_memory::pinned ? "host (pinned)" : "managed", t.description);
    out += fmt::format("  allocations {}  frees {}  passed to CUDA {}\n", t.allocations, t.frees, t.passthroughs);
    out += fmt::format("  now live {}  reserved {}  cached {}  waiting for the GPU {} (peak {})\n",
                       b(t.info.used_bytes), b(t.info.reserved_bytes), b(t.info.free_bytes), b(t.info.pending_bytes),
                       b(t.info.peak_pending_bytes));
    if (t.pooled) out += fmt::format("  fences {}  host waits for the GPU {}\n", t.fences, t.waits);
  }
}

void forget_process_memory(int device, std::vector<std::pair<void*, std::size_t>> const& dead_managed) noexcept {
  for (process_memory const which : {process_memory::pinned, process_memory::managed}) {
    process_chain* c = built(which);
    if (c == nullptr) continue;
    c->pools->forget_device(device);
    // Unpooled, a free would reach cuMemFree with a dead pointer: the counters keep
    // those blocks (a known drift, for a reset with managed memory held).
    if (which != process_memory::managed || !c->pools->pooled()) continue;
    for (auto const& [p, bytes] : dead_managed) c->top->deallocate(p, bytes);  // the pools ignore them now
  }
}

void reset_process_chains_after_fork() noexcept {
  for (auto& c : g_chains) c.store(nullptr, std::memory_order_relaxed);  // the parent's: never freed
  new (&g_build_mutex) std::mutex{};                                     // a parent thread may have held it
}

}  // namespace gpumem::shim
