#include "builtin_configs.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace gpumem::tools {

namespace {

// Canonical chains, small on purpose: growth sizes that keep peak reserved
// comparable to the log's own peak.
constexpr std::string_view pool_toml = R"(
[gpumem]
sync_mode = "stream"
[[chain]]
type = "pool"
initial_size = 0
min_growth = "2MiB"
[[chain]]
type = "cuda"
)";

constexpr std::string_view binning_toml = R"(
[gpumem]
sync_mode = "stream"
[[chain]]
type = "binning"
min_size = "256B"
max_size = "1MiB"
[[chain]]
type = "pool"
initial_size = 0
min_growth = "2MiB"
[[chain]]
type = "cuda"
)";

constexpr std::string_view cuda_toml = R"(
[gpumem]
sync_mode = "stream"
[[chain]]
type = "cuda"
)";

}  // namespace

std::vector<named_config> builtin_configs() {
  std::vector<named_config> v;
  v.push_back({"default", config::parse_toml(config::default_toml(), "embedded default")});
  v.push_back({"pool", config::parse_toml(pool_toml, "built-in pool")});
  v.push_back({"binning", config::parse_toml(binning_toml, "built-in binning")});
  v.push_back({"cuda", config::parse_toml(cuda_toml, "built-in cuda")});
  return v;
}

named_config load_config_file(std::string const& path) {
  std::ifstream f{path, std::ios::binary};
  if (!f) throw config::config_error{"gpumem-replay: cannot read config " + path};
  std::ostringstream text;
  text << f.rdbuf();
  return {std::filesystem::path{path}.stem().string(), config::parse_toml(text.str(), path)};
}

}  // namespace gpumem::tools
