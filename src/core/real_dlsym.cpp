#include <gpumem/detail/real_dlsym.hpp>

#include <dlfcn.h>

namespace gpumem::detail {

dlsym_fn real_dlsym() noexcept {
  // dlvsym is not interposed by the shim, so this finds glibc's dlsym even when
  // the shim's own dlsym shadows it. A function-local static: resolved once.
  static dlsym_fn const fn = [] {
    auto* f = reinterpret_cast<dlsym_fn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
    if (f == nullptr) f = reinterpret_cast<dlsym_fn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
    if (f == nullptr) f = reinterpret_cast<dlsym_fn>(dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34"));
    if (f == nullptr) f = reinterpret_cast<dlsym_fn>(dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5"));
    return f;
  }();
  return fn;
}

}  // namespace gpumem::detail
