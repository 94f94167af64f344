#include "report.hpp"

#include "units.hpp"

#include "log_reader.hpp"

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
  std::string rel = "+" + human_duration(at.time_ns - start_ns);
  if (at.clock_us < 0) return rel;
  return fmt::format("{} ({})", format_time_of_day(at.clock_us), rel);
}

std::vector<comparison_row> comparison_rows(report_data const& r) {
  auto const& c = *r.combined;
  std::vector<comparison_row> rows;
  auto row = [&](std::string label, auto&& value_of, std::string combined) {
    comparison_row out{std::move(label), {}, std::move(combined)};
    for (auto const& s : r.logs) out.per_log.push_back(value_of(s));
    rows.push_back(std::move(out));
  };
  auto num = [](std::uint64_t v) { return fmt::format("{}", v); };
  auto yes_no = [](bool b) { return std::string{b ? "yes" : "NO"}; };
  row(
      "complete", [&](log_summary const& s) { return yes_no(s.complete()); }, yes_no(c.complete));
  row(
      "events", [&](log_summary const& s) { return num(s.events); }, num(c.events));
  row(
      "allocations", [&](log_summary const& s) { return num(s.allocations); }, num(c.allocations));
  row(
      "frees", [&](log_summary const& s) { return num(s.frees); }, num(c.frees));
  row(
      "failures", [&](log_summary const& s) { return num(s.failures); }, num(c.failures));
  row(
      "allocated", [](log_summary const& s) { return human_bytes(s.bytes_allocated); }, human_bytes(c.bytes_allocated));
  row(
      "peak live", [](log_summary const& s) { return human_bytes(s.peak_live_bytes); }, human_bytes(c.peak_live_bytes));
  row(
      "peak reserved",
      [](log_summary const& s) { return s.peak_reserved_bytes ? human_bytes(*s.peak_reserved_bytes) : "not in log"; },
      c.peak_reserved_bytes ? human_bytes(*c.peak_reserved_bytes) : "");
  row(
      "live at end", [](log_summary const& s) { return human_bytes(s.live_at_end_bytes); },
      human_bytes(c.live_at_end_bytes));
  row(
      c.complete ? "never freed" : "live at end (n)", [&](log_summary const& s) { return num(s.live_at_end_count); },
      num(c.live_at_end_count));
  row(
      "unknown frees", [&](log_summary const& s) { return num(s.unknown_free_count); }, "");
  return rows;
}

std::string_view live_at_end_title(log_summary const& s) {
  return s.complete() ? "never freed" : "still live when the log ends (possibly freed in the lost rows)";
}

}  // namespace gpumem::tools
