#pragma once
// The command-line options gpumem_compare and gpumem_compare_shim share (CLI11, as the
// tools: --help generated, every error names the option and exits 2): where samples
// go, the round, how long a sample takes, which measurements, which sizes and thread
// counts, and which logs to replay.
// Thread safety: call from main, before other threads exist.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumem_compare {

struct common_options {
  std::string out_path;  ///< "" or "-": standard output
  int rep = 0;           ///< the round, recorded with each sample
  bool quick = false;
  double time_scale = 1.0;
  std::vector<std::string> only;                            ///< empty: every measurement
  std::vector<std::string> replay_specs;                    ///< NAME=LOG, checked
  std::vector<std::uint64_t> latency_sizes, scaling_sizes;  ///< empty: the program's defaults
  std::vector<int> threads{1, 4, 16};

  [[nodiscard]] bool wants(std::string_view measurement) const;
  /// The logs to replay: {NAME, LOG} per --replay.
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> replays() const;
};

/// Adds the shared options to `app`, filling `o` when it parses; `measurements`:
/// what --only accepts.
void add_common_options(CLI::App& app, common_options& o, std::vector<std::string> const& measurements);

/// `given` if not empty, else the default for a --quick or a full run.
[[nodiscard]] std::vector<std::uint64_t> sizes_or(std::vector<std::uint64_t> const& given, bool quick,
                                                  std::vector<std::uint64_t> quick_default,
                                                  std::vector<std::uint64_t> full_default);

}  // namespace gpumem_compare
