#pragma once
// The C library's dlsym, found without calling the public dlsym: the shim
// interposes dlsym, so any call to it from inside gpumem would re-enter the shim.
// It is dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34") (glibc >= 2.34 moved dlsym into
// libc), else the "GLIBC_2.2.5" version of older systems.

namespace gpumem::detail {

using dlsym_fn = void* (*)(void*, const char*);

/// glibc's dlsym. Resolved once; never null on glibc systems.
[[nodiscard]] dlsym_fn real_dlsym() noexcept;

}  // namespace gpumem::detail
