// dlsym: hands out the shim's hooks for the CUDA entry points it interposes,
// whatever handle the program looks them up with (libcuda's own handle, a
// libcudart handle, RTLD_DEFAULT, RTLD_NEXT).
//
// Only names "cu[A-Z]*" / "cuda[A-Z]*" are looked at. Every other lookup is
// glibc's, with the caller's identity kept where glibc uses it:
//  - RTLD_NEXT means "after the CALLER's object"; glibc would see the shim as the
//    caller, so the search is redone after the caller's own object (an OpenMP
//    runtime hung at `import torch` when a shim got this wrong).
//  - RTLD_DEFAULT from a library loaded RTLD_LOCAL also searches that library's
//    own scope: a miss in the global scope is retried there.

#include "hook_table.hpp"
#include "shim_state.hpp"

#include <gpumem/detail/real_dlsym.hpp>

#include <dlfcn.h>
#include <link.h>

namespace gpumem::shim {
namespace {

link_map* object_of(void const* addr) noexcept {
  Dl_info info{};
  link_map* map = nullptr;
  if (dladdr1(addr, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0) return nullptr;
  return map;
}

// The first definition of `name` in an object loaded after the caller's, as glibc's
// RTLD_NEXT finds it from the caller (link-map order; dlopen'ed RTLD_LOCAL objects
// after the caller are searched too, a harmless superset).
void* next_after(void const* caller, const char* name) noexcept {
  auto const sym = detail::real_dlsym();
  link_map* self = object_of(caller);
  if (self == nullptr) return sym(RTLD_NEXT, name);
  for (link_map* lm = self->l_next; lm != nullptr; lm = lm->l_next) {
    if (lm->l_name == nullptr || lm->l_name[0] == '\0') continue;
    void* h = dlopen(lm->l_name, RTLD_LAZY | RTLD_NOLOAD);
    if (h == nullptr) continue;
    void* f = sym(h, name);  // searches lm and its dependencies...
    dlclose(h);
    if (f != nullptr && object_of(f) == lm) return f;  // ...but only lm's own counts here
  }
  return nullptr;
}

void* in_caller_scope(void const* caller, const char* name) noexcept {
  link_map* self = object_of(caller);
  if (self == nullptr || self->l_name == nullptr || self->l_name[0] == '\0') return nullptr;
  void* h = dlopen(self->l_name, RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return nullptr;
  void* f = detail::real_dlsym()(h, name);
  dlclose(h);
  return f;
}

}  // namespace
}  // namespace gpumem::shim

extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  using namespace gpumem::shim;
  void const* caller = __builtin_return_address(0);
  auto const sym = gpumem::detail::real_dlsym();
  if (sym == nullptr) return nullptr;
  void* f = nullptr;
  if (handle == RTLD_NEXT) {
    f = next_after(caller, name);
  } else {
    f = sym(handle, name);
    if (f == nullptr && handle == RTLD_DEFAULT) f = in_caller_scope(caller, name);
  }
  if (f == nullptr || !is_cuda_name(name)) return f;
  auto const id = hook_id_by_name(name);
  if (id == hook_id::count) return f;
  void* hook = hook_by_name(name);
  if (f == hook || !hooks_wanted()) return f;
  // Only the real function of that name becomes our hook (not another library's
  // symbol of the same name).
  return f == real_function(id) ? hook : f;
}
