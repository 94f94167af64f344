#pragma once
// The process environment as gpumem sees it: a snapshot taken once (the shim reads it
// at first use, never per call), so loading is testable with a hand-made map.

#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace gpumem::config {

struct environment {
  /// Every GPUMEM_* variable and the rank variables used by expand_template
  /// (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID, RANK). Reads environ:
  /// call it once, not per allocation.
  [[nodiscard]] static environment from_process();

  /// The value of `name`, or nullptr when unset. An empty value counts as unset.
  [[nodiscard]] std::string const* find(std::string_view name) const;

  std::map<std::string, std::string, std::less<>> vars;
};

/// Expands a path template: %p pid (getpid at call time, so a forked child gets its
/// own), %r rank (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID, RANK — the
/// first set — else 0), %h host name, %d `device`, %% a literal %. Other sequences are
/// copied unchanged (load() rejects them in configured templates). Reads the rank from
/// the process environment.
[[nodiscard]] std::string expand_template(std::string_view pattern, int device);
/// Same, with the rank taken from `env` (tests; callers holding a snapshot).
[[nodiscard]] std::string expand_template(std::string_view pattern, int device, environment const& env);

/// Empty if `pattern` is a valid template, else what is wrong with it.
[[nodiscard]] std::string check_template(std::string_view pattern);

}  // namespace gpumem::config
