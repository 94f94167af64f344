// gpumem_compare: gpumem side by side with the allocators users would pick instead,
// in one process, interleaved, on the real device (or the simulated one).
//
//   gpumem_compare [--out FILE] [--rep N] [--quick] [--only LIST] [--plugin LIB]...
//                  [--replay NAME=LOG]... [--contenders LIST] [--list]
//
// One call is one round: every measurement once, each point run by every contender in
// turn (A B C ...; the order rotates with --rep). scripts/bench-compare calls it once
// per round, between the rounds of the shim program, and bench/compare/report.py turns
// the JSON lines into tables.
#include "builtin_contenders.hpp"
#include "measurements.hpp"
#include "plugins.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace gpumem_compare {

std::unique_ptr<contender> run_context::make(contender_kind const& kind, char const* measurement) const {
  char const* why = nullptr;
  std::unique_ptr<contender> c{kind.make(&why)};
  if (!c)
    out.note(measurement, kind.name, std::string{"could not be made: "} + (why != nullptr ? why : "unknown reason"));
  return c;
}

std::string size_label(std::uint64_t bytes) {
  static constexpr char const* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + " " + units[u];
}

}  // namespace gpumem_compare

namespace {

using namespace gpumem_compare;

constexpr char const* usage_text =
    "usage: gpumem_compare [options]\n"
    "  --out FILE           append JSON lines here (default: stdout)\n"
    "  --rep N              round number, recorded with each sample; rotates the contender order\n"
    "  --quick              fewer sizes, shorter samples\n"
    "  --time-scale X       multiply every sample's target time (e.g. 0.01 for a smoke test)\n"
    "  --only LIST          measurements, comma-separated: latency,scaling,random,multistream,replay\n"
    "  --plugin LIB         load contenders from a plugin (RMM, PyTorch); repeatable\n"
    "  --replay NAME=LOG    replay this allocation log (CSV) in the replay measurement; repeatable\n"
    "  --contenders LIST    only these contenders (names as --list prints, comma-separated)\n"
    "  --latency-sizes LIST bytes, comma-separated (K/M/G suffixes: powers of 1024)\n"
    "  --scaling-sizes LIST\n"
    "  --threads LIST       thread counts of the scaling measurement (default 1,4,16)\n"
    "  --list               print the contenders and exit\n";

[[noreturn]] void usage_error(std::string const& msg) {
  std::fprintf(stderr, "gpumem_compare: %s\n%s", msg.c_str(), usage_text);
  std::exit(2);
}

std::vector<std::string> split(std::string const& s) {
  std::vector<std::string> out;
  std::stringstream in{s};
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::uint64_t parse_size(std::string const& s) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) usage_error("not a size: '" + s + "'");
  std::string const unit{end};
  if (unit == "K" || unit == "KiB")
    v <<= 10U;
  else if (unit == "M" || unit == "MiB")
    v <<= 20U;
  else if (unit == "G" || unit == "GiB")
    v <<= 30U;
  else if (!unit.empty() && unit != "B")
    usage_error("not a size: '" + s + "'");
  if (v == 0) usage_error("size 0 in '" + s + "'");
  return v;
}

std::vector<std::uint64_t> parse_sizes(std::string const& s) {
  std::vector<std::uint64_t> out;
  for (auto const& item : split(s)) out.push_back(parse_size(item));
  if (out.empty()) usage_error("empty size list");
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  run_options opt;
  std::string out_path;
  int rep = 0;
  std::set<std::string> only;
  std::vector<std::string> plugin_paths, contender_filter;
  std::vector<std::pair<std::string, std::string>> replays;
  std::string latency_sizes, scaling_sizes, threads = "1,4,16";
  bool list = false;
  static std::set<std::string> const known{"latency", "scaling", "random", "multistream", "replay"};
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--out")
      out_path = value();
    else if (a == "--rep")
      rep = std::atoi(value().c_str());
    else if (a == "--quick")
      opt.quick = true;
    else if (a == "--time-scale") {
      opt.time_scale = std::atof(value().c_str());
      if (!(opt.time_scale > 0)) usage_error("--time-scale needs a positive number");
    } else if (a == "--only") {
      for (auto const& m : split(value())) {
        if (!known.contains(m)) usage_error("unknown measurement '" + m + "'");
        only.insert(m);
      }
    } else if (a == "--plugin")
      plugin_paths.push_back(value());
    else if (a == "--replay") {
      std::string const v = value();
      auto const eq = v.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
        usage_error("--replay needs NAME=LOG, got '" + v + "'");
      replays.emplace_back(v.substr(0, eq), v.substr(eq + 1));
    } else if (a == "--contenders")
      contender_filter = split(value());
    else if (a == "--latency-sizes")
      latency_sizes = value();
    else if (a == "--scaling-sizes")
      scaling_sizes = value();
    else if (a == "--threads")
      threads = value();
    else if (a == "--list")
      list = true;
    else if (a == "--help" || a == "-h") {
      std::fputs(usage_text, stdout);
      return 0;
    } else
      usage_error("unknown option '" + a + "'");
  }
  auto const wants = [&](char const* m) { return only.empty() || only.contains(m); };

  constexpr std::uint64_t KiB = 1024, MiB = KiB << 10U, GiB = MiB << 10U;
  opt.latency_sizes = !latency_sizes.empty() ? parse_sizes(latency_sizes)
                      : opt.quick            ? std::vector<std::uint64_t>{256, 4 * KiB, 64 * KiB, MiB, 64 * MiB, GiB}
                                  : std::vector<std::uint64_t>{256, KiB,     4 * KiB,  16 * KiB, 64 * KiB,  256 * KiB,
                                                               MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, GiB};
  opt.scaling_sizes = !scaling_sizes.empty() ? parse_sizes(scaling_sizes)
                      : opt.quick            ? std::vector<std::uint64_t>{256, MiB, GiB}
                                             : std::vector<std::uint64_t>{256, 64 * KiB, MiB, 64 * MiB, GiB};
  for (auto const& t : split(threads)) {
    int const n = std::atoi(t.c_str());
    if (n < 1 || n > 256) usage_error("thread count out of range: '" + t + "'");
    opt.scaling_threads.push_back(n);
  }

  // Contenders: built in, then each plugin's, filtered, rotated by the round number.
  std::vector<contender_kind> kinds = builtin_contender_kinds();
  std::vector<std::string> plugin_notes;
  for (auto const& path : plugin_paths) {
    plugin_load const p = load_plugin(path);
    if (!p.error.empty()) {
      std::fprintf(stderr, "gpumem_compare: plugin %s not loaded: %s\n", path.c_str(), p.error.c_str());
      plugin_notes.push_back(path + ": " + p.error);
      continue;
    }
    kinds.insert(kinds.end(), p.kinds.begin(), p.kinds.end());
  }
  if (!contender_filter.empty()) {
    for (auto const& name : contender_filter) {
      if (std::none_of(kinds.begin(), kinds.end(), [&](auto const& k) { return name == k.name; })) {
        usage_error("no contender named '" + name + "' (see --list)");
      }
    }
    std::erase_if(kinds, [&](auto const& k) {
      return std::find(contender_filter.begin(), contender_filter.end(), k.name) == contender_filter.end();
    });
  }
  if (list) {
    for (auto const& k : kinds) std::printf("%-22s %-7s %s\n", k.name, k.family, k.description);
    return 0;
  }
  if (!kinds.empty()) std::rotate(kinds.begin(), kinds.begin() + (rep % static_cast<int>(kinds.size())), kinds.end());

  for (auto const& [name, path] : replays) opt.replays.push_back(plan_replay(path, name));

  device_info const dev = open_device();
  sample_writer out{out_path};
  out.set_rep(rep);
  spin_launcher const spin{dev};
  int const most_threads = *std::max_element(opt.scaling_threads.begin(), opt.scaling_threads.end());
  stream_set const streams(static_cast<std::size_t>(std::max(16, most_threads)));

  json_object meta;
  meta.add("program", "gpumem_compare").add("rep", rep).add("quick", opt.quick).add("device", dev.name);
  meta.add("driver_version", dev.driver_version).add("runtime_version", dev.runtime_version);
  meta.add("device_memory", dev.total_bytes).add("simulated", dev.simulated).add("clock_khz", dev.clock_khz);
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    json_object k;
    k.add("family", kinds[i].family).add("description", kinds[i].description).add("order", static_cast<int>(i));
    meta.add_object(std::string{"contender:"} + kinds[i].name, k);
  }
  for (auto const& p : opt.replays) {
    json_object r;
    r.add("source", p.source).add("dialect", p.dialect).add("ops", static_cast<std::uint64_t>(p.ops.size()));
    r.add("peak_live", p.peak_live).add("streams", static_cast<int>(p.streams)).add("threads", p.threads);
    r.add("skipped_frees", p.skipped_frees);
    meta.add_object("log:" + p.name, r);
  }
  if (!plugin_notes.empty()) {
    std::string joined;
    for (auto const& n : plugin_notes) joined += (joined.empty() ? "" : "; ") + n;
    meta.add("plugin_errors", joined);
  }
  out.meta(meta);

  run_context const ctx{opt, dev, out, kinds, streams, spin};
  if (wants("latency")) measure_latency(ctx);
  if (wants("scaling")) measure_scaling(ctx);
  if (wants("random")) measure_random_allocations(ctx);
  if (wants("multistream")) measure_multi_stream(ctx);
  if (wants("replay") && !opt.replays.empty()) measure_replay(ctx);
  return 0;
} catch (std::exception const& e) {
  std::fprintf(stderr, "gpumem_compare: %s\n", e.what());
  return 1;
}
