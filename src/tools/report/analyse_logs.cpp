#include "report.hpp"

#include "units.hpp"

#include <gpumem/tools/log_reader.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <memory>
#include <set>

namespace gpumem::tools {

namespace {
constexpr int max_snapshots_read = 64;  // the shim writes at most 16 per process
}  // namespace

report_data analyse_logs(std::vector<std::string> const& paths, std::size_t top_n, merged_event_observer* observer,
                         std::string const& perf_map_dir) {
  report_data r;
  r.top_n = top_n;
  symbolizer sym{perf_map_dir};
  std::vector<std::unique_ptr<log_reader>> readers;
  std::vector<log_reader*> readable;
  std::set<std::string> snapshots_read;
  auto add_snapshot = [&](std::string const& path) {
    if (!snapshots_read.insert(path).second) return;
    try {
      r.snapshots.push_back(read_snapshot(path, sym));
    } catch (std::exception const& e) { r.snapshot_errors.push_back({path, 0, e.what()}); }
  };
  for (auto const& path : paths) {
    if (path.ends_with(".json")) {
      add_snapshot(path);
      continue;
    }
    auto reader = std::make_unique<log_reader>(path);
    if (!reader->readable()) {
      r.unreadable.push_back(*reader->fatal());
      continue;
    }
    readable.push_back(reader.get());
    readers.push_back(std::move(reader));
  }
  if (readable.empty()) return r;
  auto m = analyse_merged(readable, top_n, observer);
  r.logs = std::move(m.logs);
  r.combined = std::move(m.combined);
  for (auto const& s : r.logs) {
    bool const file = s.path != "(standard input)";
    if (s.columns.stack && file) {
      r.sites.push_back(name_call_sites(s, stack_table_path(s.path), sym));
    } else {
      r.sites.emplace_back();
    }
    // The shim's snapshots beside the log: "<log>.oom-1.json", "-2", ...
    for (int n = 1; file && n <= max_snapshots_read; ++n) {
      std::string const snap = fmt::format("{}.oom-{}.json", s.path, n);
      if (::access(snap.c_str(), F_OK) != 0) break;
      add_snapshot(snap);
    }
  }
  return r;
}

std::string describe_when(log_position const& at, std::int64_t start_ns) {
  std::string const rel = "+" + human_duration(at.time_ns - start_ns);
  if (at.clock_us < 0) return rel;
  return fmt::format("{} ({})", format_time_of_day(at.clock_us), rel);
}

std::string_view live_at_end_title(log_summary const& s) {
  return s.complete() ? "never freed" : "still live when the log ends (possibly freed in the lost rows)";
}

}  // namespace gpumem::tools
