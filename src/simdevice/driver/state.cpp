#include "state.hpp"

#include "pool.hpp"
#include "stream.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

namespace gpumemsim {
namespace {

std::atomic<bool> g_initialized{false};
std::atomic<long> g_violations{0};

config read_config() {
  config c;
  if (char const* n = std::getenv("GPUMEM_SIM_DEVICES"); n != nullptr && *n != '\0') {
    c.device_count = std::atoi(n);
    if (c.device_count < 0 || c.device_count > 64) c.device_count = 2;
  }
  if (char const* m = std::getenv("GPUMEM_SIM_DEVICE_MEMORY"); m != nullptr && *m != '\0') {
    if (std::size_t const bytes = parse_size(m); bytes != 0) {
      c.device_memory = bytes;
    } else {
      std::fprintf(stderr, "gpumemsim: ignoring malformed GPUMEM_SIM_DEVICE_MEMORY=%s\n", m);
    }
  }
  char const* s = std::getenv("GPUMEM_SIM_STRICT");
  c.strict = s != nullptr && std::strcmp(s, "1") == 0;
  return c;
}

sim_state* build() {
  auto* s = new sim_state;  // intentionally immortal: exit-time callers must still find it
  s->cfg = read_config();
  for (int i = 0; i < s->cfg.device_count; ++i) {
    auto d = std::make_unique<device>();
    d->ordinal = i;
    d->heap = std::make_unique<device_heap>(i, s->cfg.device_memory);
    d->ctx.device = i;
    d->ctx.legacy = new_stream(&d->ctx, stream_kind::legacy, 0, 0);
    d->default_pool = new_pool(i, true);
    d->current_pool.store(d->default_pool);
    s->devices.push_back(std::move(d));
  }
  return s;
}

struct counters {
  std::mutex mutex;
  std::map<std::string, std::atomic<long>, std::less<>> by_name;
};
counters& all_counters() {
  static auto* c = new counters;  // immortal, like the state
  return *c;
}

// Contexts made by cuCtxCreate and green contexts, destroyed ones included
// (immortal: their handles stay recognisable).
struct created_contexts {
  std::mutex mutex;
  std::vector<context*> all;  ///< green contexts' contexts too
  std::vector<green_context*> greens;
};
created_contexts& created() {
  static auto* c = new created_contexts;
  return *c;
}

}  // namespace

sim_state& state() {
  static sim_state* s = build();
  return *s;
}

device* device_at(int ordinal) noexcept {
  auto& devs = state().devices;
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= devs.size()) return nullptr;
  return devs[static_cast<std::size_t>(ordinal)].get();
}

device* device_of(std::uintptr_t ptr) noexcept {
  for (auto& d : state().devices) {
    if (d->heap->contains(ptr)) return d.get();
  }
  return nullptr;
}

void mark_initialized() noexcept {
  (void)state();
  g_initialized.store(true, std::memory_order_release);
}

CUresult init_status() noexcept {
  return g_initialized.load(std::memory_order_acquire) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

std::vector<context*>& context_stack() noexcept {
  thread_local std::vector<context*> stack;
  return stack;
}

context* current_context() noexcept {
  auto& s = context_stack();
  return s.empty() ? nullptr : s.back();
}

CUresult require_context(context** out) noexcept {
  if (CUresult r = init_status(); r != CUDA_SUCCESS) return r;
  context* c = current_context();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!c->active()) return c->is_destroyed() ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_ERROR_INVALID_CONTEXT;
  *out = c;
  return CUDA_SUCCESS;
}

context* context_from_handle(CUcontext h) noexcept {
  if (h == nullptr) return nullptr;
  for (auto& d : state().devices) {
    if (to_handle(&d->ctx) == h) return &d->ctx;
  }
  auto& c = created();
  std::lock_guard lock(c.mutex);
  for (context* x : c.all) {
    if (to_handle(x) == h) return x->is_destroyed() ? nullptr : x;
  }
  return nullptr;
}

bool destroyed_context(CUcontext h) noexcept {
  auto& c = created();
  std::lock_guard lock(c.mutex);
  for (context* x : c.all) {
    if (to_handle(x) == h) return x->is_destroyed();
  }
  return false;
}

context* create_context(int device) {
  auto* x = new context;
  x->device = device;
  x->primary = false;
  x->refcount = 1;
  x->legacy = new_stream(x, stream_kind::legacy, 0, 0);
  auto& c = created();
  std::lock_guard lock(c.mutex);
  c.all.push_back(x);
  return x;
}

std::vector<context*> all_contexts() {
  std::vector<context*> out;
  for (auto& d : state().devices) out.push_back(&d->ctx);
  auto& c = created();
  std::lock_guard lock(c.mutex);
  for (context* x : c.all) {
    if (x->green != nullptr || !x->is_destroyed()) out.push_back(x);
  }
  return out;
}

green_context* create_green_context(int device, unsigned sm_count) {
  static std::atomic<std::uint64_t> next_id{1};
  auto* g = new green_context;
  g->sm_count = sm_count;
  g->id = next_id.fetch_add(1, std::memory_order_relaxed);
  g->primary = &device_at(device)->ctx;
  auto* x = new context;
  x->device = device;
  x->primary = false;
  x->green = g;
  x->refcount = 1;
  x->legacy = new_stream(x, stream_kind::legacy, 0, 0);
  x->recorder = new_stream(x, stream_kind::internal, CU_STREAM_NON_BLOCKING, 0);
  g->ctx = x;
  auto& c = created();
  std::lock_guard lock(c.mutex);
  c.all.push_back(x);
  c.greens.push_back(g);
  return g;
}

CUresult resolve_green(CUgreenCtx h, char const* entry, green_context** out) noexcept {
  if (CUresult r = init_status(); r != CUDA_SUCCESS) return r;
  green_context* found = nullptr;
  {
    auto& c = created();
    std::lock_guard lock(c.mutex);
    for (green_context* g : c.greens) {
      if (to_handle(g) == h) found = g;
    }
  }
  if (found == nullptr) return CUDA_ERROR_INVALID_CONTEXT;  // guessed
  if (found->ctx->is_destroyed()) {
    violation("use of destroyed green context %p (%s)", static_cast<void*>(h), entry);
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  *out = found;
  return CUDA_SUCCESS;
}

std::vector<context*> green_contexts_of(context const* primary) {
  std::vector<context*> out;
  auto& c = created();
  std::lock_guard lock(c.mutex);
  for (green_context* g : c.greens) {
    if (g->primary == primary) out.push_back(g->ctx);
  }
  return out;
}

void violation(char const* fmt, ...) {
  g_violations.fetch_add(1, std::memory_order_relaxed);
  char line[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  std::fprintf(stderr, "gpumemsim: violation: %s\n", line);
}

long violation_count() noexcept { return g_violations.load(std::memory_order_relaxed); }
void reset_violations() noexcept { g_violations.store(0, std::memory_order_relaxed); }

std::atomic<long>& call_counter(char const* entry) noexcept {
  auto& c = all_counters();
  std::lock_guard lock(c.mutex);
  return c.by_name.try_emplace(entry, 0).first->second;
}

long call_count(char const* entry) noexcept {
  auto& c = all_counters();
  std::lock_guard lock(c.mutex);
  if (std::string_view{entry} == "*") {
    long total = 0;
    for (auto const& [name, n] : c.by_name) total += n.load(std::memory_order_relaxed);
    return total;
  }
  auto it = c.by_name.find(entry);
  return it == c.by_name.end() ? 0 : it->second.load(std::memory_order_relaxed);
}

std::size_t parse_size(char const* text) noexcept {
  char* end = nullptr;
  unsigned long long const n = std::strtoull(text, &end, 10);
  if (end == text) return 0;
  std::string_view const suffix(end);
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B")
    shift = 0;
  else if (suffix == "KiB" || suffix == "KB" || suffix == "K")
    shift = 10;
  else if (suffix == "MiB" || suffix == "MB" || suffix == "M")
    shift = 20;
  else if (suffix == "GiB" || suffix == "GB" || suffix == "G")
    shift = 30;
  else
    return 0;
  if (shift != 0 && n > (~0ULL >> shift)) return 0;
  return static_cast<std::size_t>(n << shift);
}

namespace {
// GPUMEM_SIM_STRICT=1: a process that broke the rules fails visibly, even when
// its own checks passed. Runs after main returns; touches no CUDA state.
__attribute__((destructor)) void strict_exit_check() {
  char const* s = std::getenv("GPUMEM_SIM_STRICT");
  if (s == nullptr || std::strcmp(s, "1") != 0) return;
  if (long const v = violation_count(); v > 0) {
    std::fprintf(stderr, "gpumemsim: %ld violation(s) in this process (GPUMEM_SIM_STRICT=1)\n", v);
    std::fflush(stderr);
    _exit(86);
  }
}
}  // namespace

}  // namespace gpumemsim
