#include "sim_exec.hpp"

#include <gpumem/detail/driver_api.hpp>

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace gpumem::tools {

std::vector<std::string> sim_dir_candidates(std::string const& exe_path) {
  namespace fs = std::filesystem;
  fs::path const bin = fs::path{exe_path}.parent_path();
  return {(bin / ".." / "simdevice").lexically_normal().string(),
          (bin / ".." / "lib" / "gpumem" / "simdevice").lexically_normal().string()};
}

std::optional<std::string> find_sim_dir(std::string const& exe_path) {
  for (auto const& dir : sim_dir_candidates(exe_path)) {
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::path{dir} / "libcuda.so.1", ec)) return dir;
  }
  return std::nullopt;
}

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string{} : p.string();
}

std::string reexec_on_sim(std::string const& sim_dir, std::uint64_t device_bytes, std::size_t devices, char** argv) {
  std::string path = sim_dir;
  if (char const* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && *old != '\0') path += std::string{":"} + old;
  if (::setenv("LD_LIBRARY_PATH", path.c_str(), 1) != 0 || ::setenv(replay_sim_env, sim_dir.c_str(), 1) != 0 ||
      ::setenv("GPUMEM_SIM_DEVICE_MEMORY", std::to_string(device_bytes).c_str(), 1) != 0 ||
      ::setenv("GPUMEM_SIM_DEVICES", std::to_string(devices).c_str(), 1) != 0) {
    return std::string{"setenv: "} + std::strerror(errno);
  }
  std::string const exe = self_exe();
  if (exe.empty()) return "cannot find this program's path (/proc/self/exe)";
  ::execv(exe.c_str(), argv);
  return "execv " + exe + ": " + std::strerror(errno);
}

bool running_on_sim() noexcept {
  if (!detail::driver_available()) return false;
  void* h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return false;
  using present_fn = int (*)();
  auto const present = reinterpret_cast<present_fn>(::dlsym(h, "gpumemsim_present"));
  bool const sim = present != nullptr && present() == 1;
  ::dlclose(h);
  return sim;
}

}  // namespace gpumem::tools
