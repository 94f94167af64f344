// dlsym: hands out the shim's hooks for the CUDA entry points it interposes,
// whatever handle the program looks them up with (libcuda's own handle, a
// libcudart handle, RTLD_DEFAULT, RTLD_NEXT).
//
// Every other name goes to glibc's dlsym by a JUMP, not a call (the assembly
// entry below): glibc reads its return address to know who is asking, and RTLD_NEXT
// means "after the caller's object". A call from the shim would make the shim the
// caller (an OpenMP runtime hung at `import torch` when a shim got this wrong), and
// redoing the search by hand needs dlopen, which a sanitizer runtime's dlsym(RTLD_NEXT)
// lookups reach before anything (its own dlopen interceptor included) is set up.
//
// The shim's own names go to shim_dlsym, which looks them up as glibc would:
//  - RTLD_NEXT: the search is redone after the caller's own object;
//  - RTLD_DEFAULT from a library loaded RTLD_LOCAL also searches that library's
//    own scope: a miss in the global scope is retried there.

#include "hooks/hook_table.hpp"
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

extern "C" void* gpumem_shim_dlsym(void* handle, const char* name);

// Which function the dlsym entry jumps to: glibc's for every name the shim does not
// hook, shim_dlsym for the rest. Called before any constructor has run, so it only
// compares strings and reads glibc's dlsym (resolved once).
extern "C" __attribute__((visibility("hidden"), used)) void* gpumem_dlsym_target(const char* name) noexcept {
  using namespace gpumem::shim;
  auto const glibc = gpumem::detail::real_dlsym();
  if (hook_id_by_name(name) == hook_id::count && glibc != nullptr) return reinterpret_cast<void*>(glibc);
  return reinterpret_cast<void*>(&gpumem_shim_dlsym);  // (also answers "not found" without glibc's)
}

// Entered by a jump from dlsym, so __builtin_return_address(0) is the program's call site.
extern "C" __attribute__((visibility("hidden"), used, noinline)) void* gpumem_shim_dlsym(void* handle,
                                                                                         const char* name) {
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
  auto const id = hook_id_by_name(name);
  if (f == nullptr || id == hook_id::count) return f;
  void* hook = hook_by_name(name);
  if (!hooks_wanted()) {  // disabled: the real function, even by the name the shim exports
    void* real = f == hook ? real_function(id) : nullptr;
    return real != nullptr ? real : f;
  }
  if (f == hook) return f;
  // Only the real function of that name becomes our hook (not another library's
  // symbol of the same name).
  return f == real_function(id) ? hook : f;
}

// dlsym(handle, name): keep both arguments, ask gpumem_dlsym_target(name) where to go,
// restore them and jump there, leaving the caller's return address in place.
#if defined(__x86_64__)
asm(R"(
    .text
    .globl dlsym
    .type dlsym, @function
    .p2align 4
dlsym:
    .cfi_startproc
    endbr64
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    movq %rsi, %rdi
    call gpumem_dlsym_target
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    jmp *%rax
    .cfi_endproc
    .size dlsym, .-dlsym
)");
#elif defined(__aarch64__)
asm(R"(
    .text
    .globl dlsym
    .type dlsym, %function
    .p2align 4
dlsym:
    .cfi_startproc
    stp x29, x30, [sp, #-32]!
    .cfi_def_cfa_offset 32
    .cfi_offset 29, -32
    .cfi_offset 30, -24
    mov x29, sp
    stp x0, x1, [sp, #16]
    mov x0, x1
    bl gpumem_dlsym_target
    mov x16, x0
    ldp x0, x1, [sp, #16]
    ldp x29, x30, [sp], #32
    .cfi_restore 29
    .cfi_restore 30
    .cfi_def_cfa_offset 0
    br x16
    .cfi_endproc
    .size dlsym, .-dlsym
)");
#else
#error "the shim's dlsym entry is written for x86-64 and AArch64"
#endif
