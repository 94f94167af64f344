#pragma once
// Getting gpumem-replay onto the simulated device: the sim's libcuda.so.1 must be
// found by the dynamic loader before the real one, which only LD_LIBRARY_PATH at
// process start can arrange. So the tool re-executes itself once with the sim
// directory first on LD_LIBRARY_PATH (and the sim's device size in
// GPUMEM_SIM_DEVICE_MEMORY, the number in GPUMEM_SIM_DEVICES); the child sees GPUMEM_REPLAY_SIM_DIR and goes on.
// Thread safety: reexec_on_sim changes the environment: call it single-threaded,
// before any other thread exists (gpumem-replay does so at start).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpumem::tools {

/// Set in the re-executed child: the sim directory it was started with.
inline constexpr char const* replay_sim_env = "GPUMEM_REPLAY_SIM_DIR";

/// Directories searched for the sim next to the binary: <bin>/../simdevice (build
/// tree) and <bin>/../lib/gpumem/simdevice (installed).
[[nodiscard]] std::vector<std::string> sim_dir_candidates(std::string const& exe_path);

/// The first candidate holding libcuda.so.1, if any.
[[nodiscard]] std::optional<std::string> find_sim_dir(std::string const& exe_path);

/// This process's executable (/proc/self/exe).
[[nodiscard]] std::string self_exe();

/// Re-executes this program with the sim first on LD_LIBRARY_PATH and `devices`
/// simulated devices of `device_bytes` each. Returns only on failure, with the reason.
[[nodiscard]] std::string reexec_on_sim(std::string const& sim_dir, std::uint64_t device_bytes, std::size_t devices,
                                        char** argv);

/// Whether the libcuda.so.1 this process loaded is the simulated device.
[[nodiscard]] bool running_on_sim() noexcept;

}  // namespace gpumem::tools
