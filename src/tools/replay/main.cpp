// gpumem-replay LOG [--config FILE]... [--device-memory SIZE] [--csv] [--real-device]
//
// Replays an allocation log through resource chains and prints, per configuration,
// peak reserved, peak live, fragmentation at the live peak, failed allocations,
// upstream calls and the pool's page moves. Runs on the simulated device
// (re-executing itself with the sim on LD_LIBRARY_PATH, one simulated device per
// configuration) unless --real-device.
// The log is streamed: memory is bounded by the allocations live in the replay.
// Exit status: 0 all configurations replayed, 1 some could not be (built or
// replayed), 2 bad command line / unreadable log / no device.
#include "builtin_configs.hpp"
#include "replay_engine.hpp"
#include "sim_exec.hpp"

#include "command_line.hpp"

#include <gpumem/config/size_parse.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/error.hpp>
#include "log_analysis.hpp"
#include "log_messages.hpp"
#include "log_reader.hpp"
#include "text_escape.hpp"

#include <fmt/format.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace gpumem::tools;

constexpr int exit_ok = 0;
constexpr int exit_some_failed = 1;
constexpr std::uint64_t gib = std::uint64_t{1} << 30;
// Largest device the replay sizes by itself (larger than any GPU, and a mapping
// every 64-bit Linux host can make several times over).
constexpr std::uint64_t max_default_device = std::uint64_t{4} << 40;
// The simulated device offers at most this many devices.
constexpr std::size_t max_sim_devices = 64;

struct options {
  std::string log;
  std::vector<std::string> configs;
  std::optional<std::uint64_t> device_memory;
  bool csv = false;
  bool real_device = false;
};

options parse_args(int argc, char** argv) {
  options o;
  CLI::App app{
      "Replays a GPU allocation log through resource chains (the simulated device unless --real-device) "
      "and compares peak reserved, peak live, fragmentation, failures, upstream calls and pages moved.",
      "gpumem-replay"};
  app.add_option("LOG", o.log, "CSV allocation log (gpumem or RMM columns; '-': standard input)")->required();
  app.add_option("--config", o.configs,
                 "TOML configuration to compare (repeatable); default: the embedded default and the built-in "
                 "pool, binning and cuda chains")
      ->type_name("FILE")
      ->allow_extra_args(false);
  std::string device_memory;
  app.add_option("--device-memory", device_memory,
                 "simulated device size, e.g. 16GiB (default: max(1.5 x the log's peak live, 1 GiB), which takes a "
                 "first pass over the log)")
      ->type_name("SIZE")
      ->check([&o](std::string const& v) -> std::string {
        try {
          auto const size = gpumem::config::parse_size(v);
          if (size.is_percent || size.bytes == 0) return fmt::format("needs a size in bytes, got '{}'", v);
          o.device_memory = size.bytes;
          return {};
        } catch (gpumem::config::config_error const& e) { return e.what(); }
      });
  app.add_flag("--csv", o.csv, "print CSV instead of a table");
  app.add_flag("--real-device", o.real_device, "use the real CUDA driver (and time every call) instead of the sim");
  app.footer(
      "Exit status: 0 every configuration replayed, 1 some could not be built or replayed, 2 a bad command "
      "line, an unreadable log or no device.");
  parse_command_line(app, argc, argv);
  return o;
}

std::string csv_field(std::string_view s) {
  if (s.find_first_of(",\"\n\r") == std::string_view::npos) return escape_text(s);
  std::string out = "\"";
  for (char c : escape_text(s)) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string human(std::uint64_t b) { return gpumem::config::format_bytes(b); }

void print_table(std::vector<replay_result> const& rows, bool timing) {
  std::size_t name_w = 6;
  for (auto const& r : rows) name_w = std::max(name_w, escape_text(r.name).size());
  fmt::print("{:<{}}  {:>14} {:>14} {:>13} {:>7} {:>9} {:>12}", "config", name_w, "peak reserved", "peak live",
             "frag@peak", "failed", "upstream", "pages moved");
  if (timing) fmt::print(" {:>10} {:>10}", "alloc ns", "free ns");
  fmt::print("  chain\n");
  for (auto const& r : rows) {
    if (r.error) {
      fmt::print("{:<{}}  error: {}\n", escape_text(r.name), name_w, escape_text(*r.error));
      continue;
    }
    fmt::print("{:<{}}  {:>14} {:>14} {:>12.1f}% {:>7} {:>9} {:>12}", escape_text(r.name), name_w,
               human(r.peak_reserved), human(r.peak_live), r.fragmentation_at_peak * 100.0, r.failed, r.upstream_calls,
               human(r.pages_released + r.pages_remapped));
    if (timing) fmt::print(" {:>10.0f} {:>10.0f}", r.mean_allocate_ns, r.mean_free_ns);
    fmt::print("  {}\n", escape_text(r.chain));
  }
}

void print_csv(std::vector<replay_result> const& rows, bool timing) {
  fmt::print(
      "config,chain,peak_reserved_bytes,peak_live_bytes,fragmentation_at_peak,failed_allocations,"
      "upstream_calls,skipped_frees,pages_released_bytes,pages_remapped_bytes{},error\n",
      timing ? ",mean_allocate_ns,mean_free_ns" : "");
  for (auto const& r : rows) {
    fmt::print("{},{},{},{},{:.6f},{},{},{},{},{}", csv_field(r.name), csv_field(r.chain), r.peak_reserved, r.peak_live,
               r.fragmentation_at_peak, r.failed, r.upstream_calls, r.skipped_frees, r.pages_released,
               r.pages_remapped);
    if (timing) fmt::print(",{:.1f},{:.1f}", r.mean_allocate_ns, r.mean_free_ns);
    fmt::print(",{}\n", csv_field(r.error.value_or("")));
  }
}

/// Whether `path` cannot be read twice: standard input, a pipe, a device. (A path
/// that cannot be opened at all is left to the reader, which says why.)
bool read_once_only(std::string const& path) {
  struct stat st {};
  return path == "-" || (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode));
}

/// Peak live bytes of the log (a first pass, to size the simulated device).
std::optional<std::uint64_t> peak_live_of(std::string const& path) {
  log_reader reader{path};
  if (!reader.readable()) {
    fmt::print(stderr, "error: {}\n", escape_text(reader.fatal()->text()));
    return std::nullopt;
  }
  log_analyzer analysis{reader.columns(), 0};
  log_event ev;
  while (reader.next(ev)) analysis.add(ev);
  return analysis.finish(reader).peak_live_bytes;
}

/// max(1.5 x peak, 1 GiB), at most max_default_device.
std::uint64_t default_device_size(std::uint64_t peak) {
  long double const wanted = static_cast<long double>(peak) * 1.5L;
  if (wanted >= static_cast<long double>(max_default_device)) return max_default_device;
  return std::max(static_cast<std::uint64_t>(wanted), gib);
}

/// The log's warnings on stderr, and the sentence (if any) on why it is incomplete.
std::optional<std::string> warn_about(log_reader const& reader) {
  log_file_info const log = reader.info();
  print_warnings(log);
  if (log.complete()) return std::nullopt;
  return fmt::format("{} is incomplete: {}; the replay misses them, so its numbers may be low", escape_text(log.path),
                     escape_text(incomplete_reason(*log.incomplete)));
}

/// In the re-executed child: checks the simulated devices are what was asked for.
bool check_sim_devices(std::size_t count) {
  auto const& drv = gpumem::detail::driver();
  int n = 0;
  if (drv.cuDeviceGetCount(&n) != CUDA_SUCCESS || n < static_cast<int>(count)) {
    fmt::print(stderr, "gpumem-replay: the simulated device offers {} devices, {} needed\n", n, count);
    return false;
  }
  char const* asked = std::getenv("GPUMEM_SIM_DEVICE_MEMORY");
  for (std::size_t d = 0; d < count; ++d) {
    std::size_t total = 0;
    if (drv.cuDeviceTotalMem(&total, static_cast<CUdevice>(d)) != CUDA_SUCCESS || total == 0) {
      fmt::print(stderr,
                 "gpumem-replay: the simulated device could not be given {} bytes of memory (the host could not "
                 "map that much); pass a smaller --device-memory\n",
                 asked != nullptr ? asked : "the requested");
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) try {
  options const opts = parse_args(argc, argv);
  bool const child = std::getenv(replay_sim_env) != nullptr;

  std::vector<named_config> configs;
  try {
    if (opts.configs.empty()) {
      configs = builtin_configs();
    } else {
      for (auto const& f : opts.configs) configs.push_back(load_config_file(f));
    }
  } catch (std::exception const& e) {
    fmt::print(stderr, "{}\n", e.what());
    return exit_usage;
  }

  if (!opts.real_device && !child) {
    // Everything that can fail fast does, before a long first pass.
    if (configs.size() > max_sim_devices) {
      fmt::print(stderr, "gpumem-replay: at most {} configurations at a time (one simulated device each)\n",
                 max_sim_devices);
      return exit_usage;
    }
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
    std::uint64_t device_bytes = 0;
    if (opts.device_memory) {
      device_bytes = *opts.device_memory;
    } else {
      if (read_once_only(opts.log)) {
        fmt::print(stderr,
                   "gpumem-replay: {} is not a regular file (a pipe?): pass --device-memory, because sizing the "
                   "device from the log's peak takes a first pass over it\n",
                   escape_text(opts.log));
        return exit_usage;
      }
      auto const peak = peak_live_of(opts.log);
      if (!peak) return exit_usage;
      device_bytes = default_device_size(*peak);
      if (device_bytes == max_default_device && static_cast<long double>(*peak) * 1.5L > device_bytes) {
        fmt::print(stderr,
                   "gpumem-replay: the log's peak live ({}) is more than a simulated device holds: replaying on {}, "
                   "so allocations beyond that fail (pass --device-memory to choose)\n",
                   human(*peak), human(device_bytes));
      }
    }
    std::string const why = reexec_on_sim(*sim, device_bytes, configs.size(), argv);
    fmt::print(stderr, "gpumem-replay: cannot restart on the simulated device: {}\n", why);
    return exit_usage;
  }

  if (opts.real_device && configs.size() > 1 && read_once_only(opts.log)) {
    fmt::print(stderr,
               "gpumem-replay: {} is not a regular file (a pipe?): on a real device each configuration "
               "replays in a pass of its own, so give one --config or a file\n",
               escape_text(opts.log));
    return exit_usage;
  }
  auto first = std::make_unique<log_reader>(opts.log);
  if (!first->readable()) {
    fmt::print(stderr, "error: {}\n", escape_text(first->fatal()->text()));
    return exit_usage;
  }
  if (!gpumem::detail::driver_available()) {
    fmt::print(stderr, "gpumem-replay: no CUDA driver: {}\n",
               gpumem::result_name(gpumem::detail::driver().init_result));
    return exit_usage;
  }
  if (!opts.real_device) {
    if (!running_on_sim()) {
      // Never replay on a real GPU by accident (e.g. a loader that ignored LD_LIBRARY_PATH).
      fmt::print(stderr,
                 "gpumem-replay: libcuda.so.1 loaded from the library path is not the simulated device; "
                 "pass --real-device to replay on it\n");
      return exit_usage;
    }
    if (!check_sim_devices(configs.size())) return exit_usage;
  }

  std::string const dialect{first->dialect()};
  std::optional<std::string> note;
  replay_pass pass;
  if (opts.real_device) {
    // One GPU: each configuration gets it whole, in a pass of its own.
    for (std::size_t i = 0; i < configs.size(); ++i) {
      auto reader = i == 0 ? std::move(first) : std::make_unique<log_reader>(opts.log);
      auto one = replay_log(*reader, {configs[i]}, {0}, true);
      if (i == 0) {
        pass = std::move(one);
        note = warn_about(*reader);
      } else {
        pass.results.push_back(std::move(one.results.front()));
      }
    }
  } else {
    std::vector<int> devices(configs.size());
    for (std::size_t i = 0; i < devices.size(); ++i) devices[i] = static_cast<int>(i);
    pass = replay_log(*first, configs, devices, false);
    note = warn_about(*first);
  }
  if (note) fmt::print(stderr, "warning: {}\n", *note);

  if (!opts.csv) {
    fmt::print("replay of {}: {} events, {}{} threads, {}{} streams ({} log)\n",
               escape_text(opts.log == "-" ? "(standard input)" : opts.log), pass.events, pass.threads,
               pass.counts_capped ? "+" : "", pass.streams, pass.counts_capped ? "+" : "", dialect);
    if (note) fmt::print("WARNING: {}\n", *note);
    if (opts.real_device) {
      fmt::print("device: real CUDA device (host time per call in ns)\n");
    } else {
      std::size_t total = 0;
      static_cast<void>(gpumem::detail::driver().cuDeviceTotalMem(&total, 0));
      fmt::print("device: simulated, {} (one per configuration)\n", human(total));
    }
    fmt::print(
        "order: each thread's calls in log order, threads merged by time, issued from one thread "
        "per configuration on one stream per log stream\n\n");
    print_table(pass.results, opts.real_device);
    for (auto const& r : pass.results) {
      if (r.skipped_frees > 0) {
        fmt::print("\n{}: {} frees of pointers not live in the replay were skipped\n", escape_text(r.name),
                   r.skipped_frees);
      }
    }
  } else {
    print_csv(pass.results, opts.real_device);
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    fmt::print(stderr, "gpumem-replay: cannot write to standard output: {}\n", std::strerror(errno != 0 ? errno : EIO));
    return exit_some_failed;
  }
  bool const all_ok = std::none_of(pass.results.begin(), pass.results.end(),
                                   [](replay_result const& r) { return r.error.has_value(); });
  return all_ok ? exit_ok : exit_some_failed;
} catch (std::exception const& e) {
  // Unexpected (out of memory, say): a message and a failure status, not std::terminate.
  std::fprintf(stderr, "gpumem-replay: %s\n", e.what());
  return exit_some_failed;
}
