// gpumem_compare: gpumem side by side with the allocators users would pick instead,
// in one process, interleaved, on the real device (or the simulated one).
//
//   gpumem_compare [--out FILE] [--rep N] [--quick] [--only LIST] [--plugin LIB]...
//                  [--replay NAME=LOG]... [--contenders LIST] [--list]     (--help: all)
//
// One call is one round: every measurement once, each point run by every contender in
// turn (A B C ...; the order rotates with --rep). scripts/bench-compare calls it once
// per round, between the rounds of the shim program, and bench/compare/report.py turns
// the JSON lines into tables.
#include "builtin_contenders.hpp"
#include "measurements.hpp"
#include "options.hpp"
#include "plugins.hpp"

#include "command_line.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
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

}  // namespace gpumem_compare

namespace {

using namespace gpumem_compare;

struct options {
  common_options common;
  std::vector<std::string> plugins, contenders;
  bool list = false;
};

options parse_args(int argc, char** argv) {
  options o;
  CLI::App app{
      "gpumem side by side with the allocators users would pick instead: one round of every measurement, "
      "each point run by every contender in turn (the order rotates with --rep), samples as JSON lines.",
      "gpumem_compare"};
  add_common_options(app, o.common, {"latency", "scaling", "random", "multistream", "replay"});
  app.add_option("--plugin", o.plugins, "load contenders from a plugin (RMM, PyTorch); repeatable")
      ->type_name("LIB")
      ->allow_extra_args(false);
  app.add_option("--contenders", o.contenders, "only these contenders (names as --list prints, comma-separated)")
      ->type_name("LIST")
      ->delimiter(',');
  app.add_flag("--list", o.list, "print the contenders and exit");
  gpumem::tools::parse_command_line(app, argc, argv);
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  options const args = parse_args(argc, argv);
  common_options const& common = args.common;
  int const rep = common.rep;
  run_options opt;
  opt.quick = common.quick;
  opt.time_scale = common.time_scale;
  constexpr std::uint64_t KiB = 1024, MiB = KiB << 10U, GiB = MiB << 10U;
  opt.latency_sizes = sizes_or(
      common.latency_sizes, opt.quick, {256, 4 * KiB, 64 * KiB, MiB, 64 * MiB, GiB},
      {256, KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, GiB});
  opt.scaling_sizes = sizes_or(common.scaling_sizes, opt.quick, {256, MiB, GiB}, {256, 64 * KiB, MiB, 64 * MiB, GiB});
  opt.scaling_threads = common.threads;

  // Contenders: built in, then each plugin's, filtered, rotated by the round number.
  std::vector<contender_kind> kinds = builtin_contender_kinds();
  std::vector<std::string> plugin_notes;
  for (auto const& path : args.plugins) {
    plugin_load const p = load_plugin(path);
    if (!p.error.empty()) {
      std::fprintf(stderr, "gpumem_compare: plugin %s not loaded: %s\n", path.c_str(), p.error.c_str());
      plugin_notes.push_back(path + ": " + p.error);
      continue;
    }
    kinds.insert(kinds.end(), p.kinds.begin(), p.kinds.end());
  }
  if (!args.contenders.empty()) {
    for (auto const& name : args.contenders) {
      if (std::none_of(kinds.begin(), kinds.end(), [&](auto const& k) { return name == k.name; })) {
        std::fprintf(stderr, "gpumem_compare: --contenders: no contender named '%s' (see --list)\n", name.c_str());
        return gpumem::tools::exit_usage;
      }
    }
    std::erase_if(kinds, [&](auto const& k) {
      return std::find(args.contenders.begin(), args.contenders.end(), k.name) == args.contenders.end();
    });
  }
  if (args.list) {
    for (auto const& k : kinds) std::printf("%-22s %-7s %s\n", k.name, k.family, k.description);
    return 0;
  }
  if (!kinds.empty()) std::rotate(kinds.begin(), kinds.begin() + (rep % static_cast<int>(kinds.size())), kinds.end());

  for (auto const& [name, path] : common.replays()) opt.replays.push_back(plan_replay(path, name));

  device_info const dev = open_device();
  sample_writer out{common.out_path};
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
  if (common.wants("latency")) measure_latency(ctx);
  if (common.wants("scaling")) measure_scaling(ctx);
  if (common.wants("random")) measure_random_allocations(ctx);
  if (common.wants("multistream")) measure_multi_stream(ctx);
  if (common.wants("replay") && !opt.replays.empty()) measure_replay(ctx);
  return 0;
} catch (std::exception const& e) {
  std::fprintf(stderr, "gpumem_compare: %s\n", e.what());
  return 1;
}
