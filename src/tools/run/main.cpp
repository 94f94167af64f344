// gpumem-run: sets the GPUMEM_* environment, prepends the shim to LD_PRELOAD and
// exec()s the program (see run_options.hpp and --help).

#include "run_options.hpp"
#include "shim_check.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef GPUMEM_VERSION
#define GPUMEM_VERSION "unknown"
#endif

namespace {

std::string exe_dir() {
  std::vector<char> buf(4096);
  ssize_t const n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return ".";
  std::string path{buf.data(), static_cast<std::size_t>(n)};
  auto const slash = path.rfind('/');
  return slash == std::string::npos ? std::string{"."} : path.substr(0, slash);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpumem::run;
  std::vector<std::string> args(argv + 1, argv + argc);
  run_options opts;
  try {
    opts = parse_arguments(args);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "gpumem-run: %s\n", e.what());
    return 2;
  }
  if (opts.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (opts.version) {
    std::printf("gpumem-run %s\n", GPUMEM_VERSION);
    return 0;
  }
  char const* shim_env = std::getenv("GPUMEM_SHIM");
  std::string const shim = find_shim(exe_dir(), shim_env != nullptr ? shim_env : "");
  if (shim.empty()) {
    if (shim_env != nullptr && *shim_env != '\0') {
      std::fprintf(stderr, "gpumem-run: GPUMEM_SHIM=%s: no such readable file\n", shim_env);
    } else {
      std::fprintf(stderr, "gpumem-run: libgpumem_shim.so not found next to gpumem-run (%s/../lib); set GPUMEM_SHIM\n",
                   exe_dir().c_str());
    }
    return 2;
  }
  if (std::string const problem = check_shim(shim); !problem.empty()) {
    std::fprintf(stderr, "gpumem-run: %s%s\n", shim_env != nullptr && *shim_env != '\0' ? "GPUMEM_SHIM=" : "",
                 problem.c_str());
    return 2;
  }
  for (auto const& [name, value] : opts.env) {
    if (::setenv(name.c_str(), value.c_str(), 1) != 0) {
      std::fprintf(stderr, "gpumem-run: cannot set %s: %s\n", name.c_str(), std::strerror(errno));
      return 2;
    }
  }
  char const* preload = std::getenv("LD_PRELOAD");
  std::string const new_preload = prepend_preload(shim, preload != nullptr ? preload : "");
  if (::setenv("LD_PRELOAD", new_preload.c_str(), 1) != 0) {
    std::fprintf(stderr, "gpumem-run: cannot set LD_PRELOAD: %s\n", std::strerror(errno));
    return 2;
  }
  std::vector<char*> cargv;
  for (auto& a : opts.command) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  ::execvp(cargv[0], cargv.data());
  int const err = errno;
  std::fprintf(stderr, "gpumem-run: cannot run %s: %s\n", cargv[0], std::strerror(err));
  return err == ENOENT ? 127 : 126;  // the shell's codes
}
