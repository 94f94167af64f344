#include "options.hpp"

#include <algorithm>
#include <cstdlib>

namespace gpumem_compare {
namespace {

/// CLI11 transform: a byte count with an optional K/M/G (KiB/MiB/GiB, B) suffix,
/// powers of 1024, rewritten as plain bytes; or what is wrong with it.
std::string bytes_with_suffix(std::string& s) {
  char* end = nullptr;
  unsigned long long const v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str() || s[0] == '-') return "not a size: '" + s + "'";
  std::string const unit{end};
  unsigned shift = 0;
  if (unit == "K" || unit == "KiB") {
    shift = 10;
  } else if (unit == "M" || unit == "MiB") {
    shift = 20;
  } else if (unit == "G" || unit == "GiB") {
    shift = 30;
  } else if (!unit.empty() && unit != "B") {
    return "not a size: '" + s + "'";
  }
  if (v == 0) return "size 0 in '" + s + "'";
  if (v > (~0ULL >> shift)) return "size too large: '" + s + "'";
  s = std::to_string(v << shift);
  return {};
}

std::string name_eq_log(std::string const& v) {
  auto const eq = v.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == v.size()) return "needs NAME=LOG, got '" + v + "'";
  return {};
}

}  // namespace

bool common_options::wants(std::string_view measurement) const {
  return only.empty() || std::find(only.begin(), only.end(), measurement) != only.end();
}

std::vector<std::pair<std::string, std::string>> common_options::replays() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto const& v : replay_specs) {
    auto const eq = v.find('=');
    out.emplace_back(v.substr(0, eq), v.substr(eq + 1));
  }
  return out;
}

void add_common_options(CLI::App& app, common_options& o, std::vector<std::string> const& measurements) {
  app.add_option("--out", o.out_path, "append JSON lines here (default: standard output)")->type_name("FILE");
  app.add_option("--rep", o.rep, "round number, recorded with each sample")
      ->type_name("N")
      ->check(CLI::NonNegativeNumber.description(""));
  app.add_flag("--quick", o.quick, "fewer sizes, shorter samples");
  app.add_option("--time-scale", o.time_scale, "multiply every sample's target time (e.g. 0.01 for a smoke test)")
      ->type_name("X")
      ->check(CLI::PositiveNumber.description(""));
  std::string only = "measurements, comma-separated:";
  for (auto const& m : measurements) only += (only.back() == ':' ? " " : ",") + m;
  app.add_option("--only", o.only, only)
      ->type_name("LIST")
      ->delimiter(',')
      ->check(CLI::IsMember(measurements).description(""));
  app.add_option("--replay", o.replay_specs, "replay this allocation log (CSV) in the replay measurement; repeatable")
      ->type_name("NAME=LOG")
      ->allow_extra_args(false)
      ->check(CLI::Validator{name_eq_log, ""});
  app.add_option("--latency-sizes", o.latency_sizes, "bytes, comma-separated (K/M/G suffixes: powers of 1024)")
      ->type_name("LIST")
      ->delimiter(',')
      ->transform(CLI::Validator{bytes_with_suffix, ""});
  app.add_option("--scaling-sizes", o.scaling_sizes, "bytes, comma-separated, of the scaling measurement")
      ->type_name("LIST")
      ->delimiter(',')
      ->transform(CLI::Validator{bytes_with_suffix, ""});
  app.add_option("--threads", o.threads, "thread counts of the scaling measurement, comma-separated (default 1,4,16)")
      ->type_name("LIST")
      ->delimiter(',')
      ->check(CLI::Range(1, 256).description(""));
}

std::vector<std::uint64_t> sizes_or(std::vector<std::uint64_t> const& given, bool quick,
                                    std::vector<std::uint64_t> quick_default, std::vector<std::uint64_t> full_default) {
  if (!given.empty()) return given;
  return quick ? std::move(quick_default) : std::move(full_default);
}

}  // namespace gpumem_compare
