#pragma once
// gpumem-run's command line, parsed into the GPUMEM_* environment it sets.
// Pure (no environment access, no I/O): the launcher and the tests share it.

#include <string>
#include <utility>
#include <vector>

namespace gpumem::run {

struct run_options {
  /// GPUMEM_* variables to set, in command-line order.
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> command;  ///< program and its arguments
  bool help = false;
  bool version = false;
};

/// Parses argv[1..]. Throws std::invalid_argument with a one-line message naming the
/// option ("--pool-size: \"12XB\": unknown unit \"XB\"") for unknown options,
/// missing or invalid values (sizes checked with config::parse_size) and a
/// missing command.
[[nodiscard]] run_options parse_arguments(std::vector<std::string> const& args);

/// LD_PRELOAD with `shim` first (kept once if already there). `current` may be empty.
[[nodiscard]] std::string prepend_preload(std::string const& shim, std::string const& current);

/// Where libgpumem_shim.so is, given the directory holding gpumem-run and the value
/// of GPUMEM_SHIM (empty: unset): GPUMEM_SHIM, else <dir>/../lib (build tree and
/// install prefix alike), else <dir>. Empty when none exists.
[[nodiscard]] std::string find_shim(std::string const& exe_dir, std::string const& shim_env);

/// The --help text.
[[nodiscard]] std::string usage();

}  // namespace gpumem::run
