#include "shim_check.hpp"

#include <dlfcn.h>

namespace gpumem::run {

std::string check_shim(std::string const& path) {
  ::dlerror();  // clear a stale message
  // RTLD_NODELETE: the shim carries its own static libstdc++, whose start-up
  // allocations would be lost (and reported as leaks) if it were unmapped again;
  // gpumem-run execs the program right after anyway.
  void* const handle = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    char const* why = ::dlerror();
    return path + ": not a loadable shared library (" + (why != nullptr ? why : "dlopen failed") + ")";
  }
  // dlsym on the handle looks in the library and its dependencies only.
  bool const is_shim = ::dlsym(handle, "gpumem_shim_get_stats") != nullptr;
  ::dlclose(handle);
  if (!is_shim) return path + ": a shared library, but not gpumem's shim (it does not export gpumem_shim_get_stats)";
  return {};
}

}  // namespace gpumem::run
