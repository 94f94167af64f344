#include "builtin_configs.hpp"

#include <gpumem/config/config_error.hpp>
#include <gpumem/config/config_file.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <initializer_list>
#include <string_view>

namespace gpumem::tools {

namespace {

// Canonical chains, small on purpose: growth sizes that keep peak reserved
// comparable to the log's own peak. Stream mode: RMM's semantics.
constexpr std::string_view stream_mode = "[gpumem]\nsync_mode = \"stream\"\n";
constexpr std::string_view binning = R"(
[[chain]]
type = "binning"
min_size = "256B"
max_size = "1MiB"
)";
constexpr std::string_view pool = R"(
[[chain]]
type = "pool"
initial_size = 0
min_growth = "2MiB"
)";
constexpr std::string_view cuda = R"(
[[chain]]
type = "cuda"
)";

/// A stream-mode configuration of the given chain entries, outermost first.
config::settings stream_chain(std::initializer_list<std::string_view> entries, std::string_view name) {
  std::string toml{stream_mode};
  for (std::string_view e : entries) toml += e;
  return config::parse_toml(toml, name);
}

}  // namespace

std::vector<named_config> builtin_configs() {
  std::vector<named_config> v;
  v.push_back({"default", config::parse_toml(config::default_toml(), "embedded default")});
  v.push_back({"pool", stream_chain({pool, cuda}, "built-in pool")});
  v.push_back({"binning", stream_chain({binning, pool, cuda}, "built-in binning")});
  v.push_back({"cuda", stream_chain({cuda}, "built-in cuda")});
  return v;
}

named_config load_config_file(std::string const& path) {
  std::string why;
  auto const text = config::read_config_file(path, why);
  if (!text) throw config::config_error{fmt::format("gpumem-replay: cannot read config {}: {}", path, why)};
  return {std::filesystem::path{path}.stem().string(), config::parse_toml(*text, path)};
}

}  // namespace gpumem::tools
