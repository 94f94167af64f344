#include "hooks/hook_table.hpp"

#include <gpumem/detail/real_dlsym.hpp>

#include <dlfcn.h>
#include <link.h>

#include <array>
#include <atomic>
#include <cstring>

// The hooks, by their exported names only: their C++ signatures live with their
// definitions (driver_hooks.cpp, runtime_hooks.cpp, proc_address.cpp); here only
// their addresses matter. -Bsymbolic makes these the shim's own definitions.
#define GPUMEM_DECLARE_HOOK_SYMBOL(n) extern "C" void gpumem_hook_symbol_##n() __asm__(#n);
GPUMEM_DRIVER_HOOKS(GPUMEM_DECLARE_HOOK_SYMBOL)
GPUMEM_RUNTIME_HOOKS(GPUMEM_DECLARE_HOOK_SYMBOL)
#undef GPUMEM_DECLARE_HOOK_SYMBOL

namespace gpumem::shim {

// The _ptsz flags come from the names: a renamed or misordered list shows here.
static_assert(per_thread_stream(hook_id::h_cuMemFreeAsync_ptsz) && !per_thread_stream(hook_id::h_cuMemFreeAsync));
static_assert(per_thread_stream(hook_id::h_cudaMallocFromPoolAsync_ptsz) && !per_thread_stream(hook_id::h_cudaMalloc));
static_assert(!per_thread_stream(hook_id::count));

// Zero (constant) initialised: valid before any constructor runs, as hooks may be
// called from other libraries' constructors.
constinit std::array<std::atomic<void*>, hook_count> g_real_functions{};

namespace {

enum class origin : unsigned char { driver, runtime };

struct entry {
  const char* name;
  void* hook;
  origin lib;
};

std::array<entry, hook_count> const& entries() noexcept {
  static std::array<entry, hook_count> const table{{
#define GPUMEM_DRIVER_ENTRY(n) {#n, reinterpret_cast<void*>(&gpumem_hook_symbol_##n), origin::driver},
#define GPUMEM_RUNTIME_ENTRY(n) {#n, reinterpret_cast<void*>(&gpumem_hook_symbol_##n), origin::runtime},
      GPUMEM_DRIVER_HOOKS(GPUMEM_DRIVER_ENTRY) GPUMEM_RUNTIME_HOOKS(GPUMEM_RUNTIME_ENTRY)
#undef GPUMEM_DRIVER_ENTRY
#undef GPUMEM_RUNTIME_ENTRY
  }};
  return table;
}

std::atomic<bool> g_driver_resolved{false};

void* libcuda_handle() noexcept {
  // Never loads libcuda: only the copy the program already has.
  static std::atomic<void*> handle{nullptr};
  void* h = handle.load(std::memory_order_acquire);
  if (h == nullptr) {
    h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h != nullptr) handle.store(h, std::memory_order_release);
  }
  return h;
}

void resolve_driver() noexcept {
  if (g_driver_resolved.load(std::memory_order_acquire)) return;
  void* h = libcuda_handle();
  if (h == nullptr) return;
  auto const sym = detail::real_dlsym();
  auto const& e = entries();
  for (std::size_t i = 0; i < hook_count; ++i) {
    if (e[i].lib == origin::driver) g_real_functions[i].store(sym(h, e[i].name), std::memory_order_release);
  }
  g_driver_resolved.store(true, std::memory_order_release);
}

int find_cudart(dl_phdr_info* info, std::size_t, void* out) {
  const char* slash = std::strrchr(info->dlpi_name, '/');
  const char* base = slash != nullptr ? slash + 1 : info->dlpi_name;
  if (std::strncmp(base, "libcudart.so", 12) != 0) return 0;
  *static_cast<const char**>(out) = info->dlpi_name;
  return 1;
}

void* resolve_runtime(const char* name) noexcept {
  auto const sym = detail::real_dlsym();
  // The next definition after the shim in the global scope: a shared libcudart.
  if (void* f = sym(RTLD_NEXT, name)) return f;
  // A libcudart loaded privately (RTLD_LOCAL, e.g. by a Python extension) is not in
  // the global scope, yet its users bind to our exports: find it by name.
  const char* path = nullptr;
  dl_iterate_phdr(find_cudart, static_cast<void*>(&path));
  if (path == nullptr) return nullptr;
  void* h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return nullptr;
  void* f = sym(h, name);
  dlclose(h);  // still loaded by its owner; we keep no extra reference
  return f;
}

}  // namespace

hook_id hook_id_by_name(const char* name) noexcept {
  if (!is_cuda_name(name)) return hook_id::count;
  auto const& e = entries();
  for (std::size_t i = 0; i < hook_count; ++i) {
    if (std::strcmp(e[i].name, name) == 0) return static_cast<hook_id>(i);
  }
  return hook_id::count;
}

void* hook_by_name(const char* name) noexcept {
  auto const id = hook_id_by_name(name);
  return id == hook_id::count ? nullptr : entries()[static_cast<std::size_t>(id)].hook;
}

void* resolve_real_function(hook_id id) noexcept {
  auto const i = static_cast<std::size_t>(id);
  if (i >= hook_count) return nullptr;
  if (void* f = g_real_functions[i].load(std::memory_order_acquire)) return f;
  auto const& e = entries()[i];
  if (e.lib == origin::driver) {
    resolve_driver();
    return g_real_functions[i].load(std::memory_order_acquire);
  }
  void* f = resolve_runtime(e.name);
  if (f == e.hook) f = nullptr;  // never call ourselves
  if (f != nullptr) g_real_functions[i].store(f, std::memory_order_release);
  return f;
}

void* hook_for_real(void* fn) noexcept {
  if (fn == nullptr) return nullptr;
  resolve_driver();
  auto const& e = entries();
  for (std::size_t i = 0; i < hook_count; ++i) {
    if (e[i].hook == fn) return fn;
    // Runtime entries count once resolved; resolvers hand out driver functions.
    if (g_real_functions[i].load(std::memory_order_acquire) == fn) return e[i].hook;
  }
  return fn;
}

}  // namespace gpumem::shim
