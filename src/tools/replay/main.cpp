// gpumem-replay LOG [--config F]... [--device-memory SIZE] [--csv] [--real-device]
//
// Replays an allocation log through resource chains and prints, per configuration,
// peak reserved, peak live, fragmentation at the live peak, failed allocations and
// upstream calls. Runs on the simulated device (re-executing itself with the sim on
// LD_LIBRARY_PATH) unless --real-device. Exit status: 0 all configurations replayed,
// 1 some could not be (built or replayed), 2 bad command line / unreadable log / no
// device.
#include "builtin_configs.hpp"
#include "replay_engine.hpp"
#include "sim_exec.hpp"

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/error.hpp>
#include <gpumem/tools/alloc_log.hpp>
#include <gpumem/tools/log_analysis.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace gpumem::tools;

constexpr int exit_ok = 0;
constexpr int exit_some_failed = 1;
constexpr int exit_usage = 2;
constexpr std::size_t warnings_shown = 20;
constexpr std::size_t gib = std::size_t{1} << 30;

constexpr char const* usage =
    "usage: gpumem-replay LOG [--config FILE]... [--device-memory SIZE] [--csv] [--real-device]\n"
    "  LOG                 CSV allocation log (gpumem or RMM columns)\n"
    "  --config FILE       TOML configuration to compare (repeatable); default: the embedded\n"
    "                      default and the built-in pool, binning and cuda chains\n"
    "  --device-memory SZ  simulated device size (default max(1.5 x the log's peak live, 1 GiB))\n"
    "  --csv               print CSV instead of a table\n"
    "  --real-device       use the real CUDA driver (and time every call) instead of the sim\n";

struct options {
  std::string log;
  std::vector<std::string> configs;
  std::optional<std::size_t> device_memory;
  bool csv = false;
  bool real_device = false;
};

std::optional<options> parse_args(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view const a = argv[i];
    auto value = [&]() -> char const* {
      if (i + 1 >= argc) {
        fmt::print(stderr, "gpumem-replay: {} needs a value\n", a);
        return nullptr;
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      std::exit(exit_ok);
    } else if (a == "--csv") {
      o.csv = true;
    } else if (a == "--real-device") {
      o.real_device = true;
    } else if (a == "--config") {
      char const* v = value();
      if (!v) return std::nullopt;
      o.configs.emplace_back(v);
    } else if (a == "--device-memory") {
      char const* v = value();
      if (!v) return std::nullopt;
      try {
        auto const size = gpumem::config::parse_size(v);
        if (size.is_percent || size.bytes == 0) {
          fmt::print(stderr, "gpumem-replay: --device-memory needs a size in bytes, got '{}'\n", v);
          return std::nullopt;
        }
        o.device_memory = static_cast<std::size_t>(size.bytes);
      } catch (gpumem::config::config_error const& e) {
        fmt::print(stderr, "gpumem-replay: --device-memory: {}\n", e.what());
        return std::nullopt;
      }
    } else if (a.size() > 1 && a[0] == '-') {
      fmt::print(stderr, "gpumem-replay: unknown option '{}'\n", a);
      return std::nullopt;
    } else if (o.log.empty()) {
      o.log = a;
    } else {
      fmt::print(stderr, "gpumem-replay: one log at a time (got '{}' and '{}')\n", o.log, a);
      return std::nullopt;
    }
  }
  if (o.log.empty()) {
    fmt::print(stderr, "gpumem-replay: no log given\n");
    return std::nullopt;
  }
  return o;
}

std::string csv_field(std::string_view s) {
  if (s.find_first_of(",\"\n") == std::string_view::npos) return std::string{s};
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string human(std::uint64_t b) { return gpumem::config::format_bytes(b); }

void print_table(std::vector<replay_result> const& rows, bool timing) {
  std::size_t name_w = 6;
  for (auto const& r : rows) name_w = std::max(name_w, r.name.size());
  fmt::print("{:<{}}  {:>14} {:>14} {:>13} {:>7} {:>9}", "config", name_w, "peak reserved", "peak live",
             "frag@peak", "failed", "upstream");
  if (timing) fmt::print(" {:>10} {:>10}", "alloc ns", "free ns");
  fmt::print("  chain\n");
  for (auto const& r : rows) {
    if (r.error) {
      fmt::print("{:<{}}  error: {}\n", r.name, name_w, *r.error);
      continue;
    }
    fmt::print("{:<{}}  {:>14} {:>14} {:>12.1f}% {:>7} {:>9}", r.name, name_w, human(r.peak_reserved),
               human(r.peak_live), r.fragmentation_at_peak * 100.0, r.failed, r.upstream_calls);
    if (timing) fmt::print(" {:>10.0f} {:>10.0f}", r.mean_allocate_ns, r.mean_free_ns);
    fmt::print("  {}\n", r.chain);
  }
}

void print_csv(std::vector<replay_result> const& rows, bool timing) {
  fmt::print("config,chain,peak_reserved_bytes,peak_live_bytes,fragmentation_at_peak,failed_allocations,"
             "upstream_calls,skipped_frees{},error\n",
             timing ? ",mean_allocate_ns,mean_free_ns" : "");
  for (auto const& r : rows) {
    fmt::print("{},{},{},{},{:.6f},{},{},{}", csv_field(r.name), csv_field(r.chain), r.peak_reserved, r.peak_live,
               r.fragmentation_at_peak, r.failed, r.upstream_calls, r.skipped_frees);
    if (timing) fmt::print(",{:.1f},{:.1f}", r.mean_allocate_ns, r.mean_free_ns);
    fmt::print(",{}\n", csv_field(r.error.value_or("")));
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto const opts = parse_args(argc, argv);
  if (!opts) {
    std::fputs(usage, stderr);
    return exit_usage;
  }
  bool const child = std::getenv(replay_sim_env) != nullptr;

  parsed_log const log = read_log(opts->log);
  if (!log.readable) {
    fmt::print(stderr, "error: {}\n", log.fatal->text());
    return exit_usage;
  }
  std::size_t const device_bytes = opts->device_memory.value_or([&] {
    auto const peak = analyze(log, 0).peak_live_bytes;
    return std::max(static_cast<std::size_t>(static_cast<double>(peak) * 1.5), gib);
  }());

  if (!opts->real_device && !child) {
    std::string const exe = self_exe();
    auto const sim = find_sim_dir(exe);
    if (!sim) {
      auto const where = sim_dir_candidates(exe);
      fmt::print(stderr,
                 "gpumem-replay: cannot find the simulated device (libcuda.so.1 in {} or {}); build the "
                 "gpumem_simdevice target, or pass --real-device to use a GPU\n",
                 where[0], where[1]);
      return exit_usage;
    }
    std::string const why = reexec_on_sim(*sim, device_bytes, argv);
    fmt::print(stderr, "gpumem-replay: cannot restart on the simulated device: {}\n", why);
    return exit_usage;
  }
  // Warnings once, from the process that does the work.
  for (std::size_t i = 0; i < std::min(log.warnings.size(), warnings_shown); ++i) {
    fmt::print(stderr, "warning: {}\n", log.warnings[i].text());
  }
  if (log.warning_count > warnings_shown) {
    fmt::print(stderr, "warning: {}: {} more warnings not shown\n", log.path, log.warning_count - warnings_shown);
  }

  if (!gpumem::detail::driver_available()) {
    fmt::print(stderr, "gpumem-replay: no CUDA driver: {}\n",
               gpumem::result_name(gpumem::detail::driver().init_result));
    return exit_usage;
  }
  if (!opts->real_device && !running_on_sim()) {
    // Never replay on a real GPU by accident (e.g. a loader that ignored LD_LIBRARY_PATH).
    fmt::print(stderr, "gpumem-replay: libcuda.so.1 loaded from the library path is not the simulated device; "
                       "pass --real-device to replay on it\n");
    return exit_usage;
  }

  std::vector<named_config> configs;
  try {
    if (opts->configs.empty()) {
      configs = builtin_configs();
    } else {
      for (auto const& f : opts->configs) configs.push_back(load_config_file(f));
    }
  } catch (std::exception const& e) {
    fmt::print(stderr, "{}\n", e.what());
    return exit_usage;
  }

  auto const order = replay_order(log);
  std::vector<replay_result> rows;
  for (auto& c : configs) rows.push_back(replay(log, order, c.settings, c.name));

  if (!opts->csv) {
    std::set<std::uint64_t> threads, streams;
    for (auto const& e : log.events) {
      threads.insert(e.thread);
      streams.insert(e.stream);
    }
    fmt::print("replay of {}: {} events, {} threads, {} streams ({} log)\n", log.path, log.events.size(),
               threads.size(), streams.size(), log.dialect());
    if (opts->real_device) {
      fmt::print("device: real CUDA device (host time per call in ns)\n");
    } else {
      fmt::print("device: simulated, {}\n", human(device_bytes));
    }
    fmt::print("order: each thread's calls in log order, threads merged by time, issued from one thread "
               "on one stream per log stream\n\n");
    print_table(rows, opts->real_device);
    for (auto const& r : rows) {
      if (r.skipped_frees > 0) {
        fmt::print("\n{}: {} frees of pointers not live in the replay were skipped\n", r.name, r.skipped_frees);
      }
    }
  } else {
    print_csv(rows, opts->real_device);
  }
  bool const all_ok = std::none_of(rows.begin(), rows.end(), [](replay_result const& r) { return r.error.has_value(); });
  return all_ok ? exit_ok : exit_some_failed;
}
