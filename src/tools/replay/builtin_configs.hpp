#pragma once
// Configurations gpumem-replay compares when no --config is given: the embedded
// default and a few canonical chains. Thread safety: pure functions.

#include <gpumem/config.hpp>

#include <string>
#include <vector>

namespace gpumem::tools {

struct named_config {
  std::string name;
  config::settings settings;
};

/// "default" (the embedded default configuration), "pool" (stream-ordered pool,
/// RMM's semantics), "binning" (size bins over a pool) and "cuda" (no caching).
[[nodiscard]] std::vector<named_config> builtin_configs();

/// A TOML file; named after the file's stem. Throws config::config_error, with the
/// path in the message, when the file cannot be read or parsed.
[[nodiscard]] named_config load_config_file(std::string const& path);

}  // namespace gpumem::tools
