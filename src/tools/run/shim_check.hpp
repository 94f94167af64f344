#pragma once
// Whether a file is a gpumem shim that the dynamic loader can preload. gpumem-run
// checks the shim before it puts it into LD_PRELOAD: for a file that is no loadable
// shared object ld.so prints a warning and runs the program without it, which would
// look like a run under gpumem and not be one.

#include <string>

namespace gpumem::run {

/// Empty when `path` loads (dlopen, RTLD_LAZY | RTLD_LOCAL: nothing of it becomes
/// visible to this process; it stays loaded) and exports gpumem_shim_get_stats; otherwise one line
/// naming the problem ("/etc/passwd: not a loadable shared library (...: invalid ELF
/// header)"). Loading runs the shim's static initializers, which make no CUDA call.
[[nodiscard]] std::string check_shim(std::string const& path);

}  // namespace gpumem::run
