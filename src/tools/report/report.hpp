#pragma once
// gpumem-report's renderings of analysed logs: text (terminal), JSON (machines,
// tests) and HTML (one self-contained page, the timeline as SVG); the Chrome trace
// is written during the pass instead (trace_writer.hpp).
// All renderings are pure functions of a report_data.

#include "json_value.hpp"
#include "log_analysis.hpp"
#include "log_event.hpp"
#include "log_merge.hpp"
#include "log_messages.hpp"
#include "symbolizer.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::tools {

/// One call site as the report shows it: its stack's numbers and named frames.
struct named_site {
  call_site_stats stats;
  bool recorded{};             ///< the stack is in the stack table (else: id only)
  std::vector<symbol> frames;  ///< innermost first
};

/// The call sites of one log (a log with a Stack column), named from its stack table.
struct call_site_report {
  std::string table_path;
  bool table_present{};
  std::size_t stacks_in_table{};
  std::vector<named_site> leaks;                              ///< by bytes live at the end, largest first
  std::vector<named_site> peak;                               ///< by bytes live at the peak, largest first
  std::vector<named_site> failures;                           ///< by failures, most first
  std::uint64_t leak_sites{}, peak_sites{}, failure_sites{};  ///< how many stacks have any
  /// Bytes and allocations without a recorded stack (sampling), at the end / the peak.
  call_site_stats unattributed;
  bool perf_map_used{};
  std::vector<log_diagnostic> warnings;
};

/// An out-of-memory snapshot (written by the shim beside the log).
struct oom_snapshot {
  std::string path;
  std::string raw;  ///< the file's JSON, as read
  json_value doc;
  std::vector<std::vector<symbol>> site_frames;  ///< top_sites[i]'s frames, named
  std::vector<symbol> request_frames;
  std::string text;  ///< what gpumem-report prints for it (text, and the HTML page's <pre>)
};

struct report_data {
  std::vector<log_summary> logs;                       ///< readable logs, command-line order
  std::vector<std::optional<call_site_report>> sites;  ///< per log: only with a Stack column
  std::vector<oom_snapshot> snapshots;                 ///< given on the command line or found beside the logs
  std::vector<log_diagnostic> snapshot_errors;
  std::vector<log_diagnostic> unreadable;    ///< why the other logs could not be read
  std::optional<combined_summary> combined;  ///< only with two or more readable logs
  std::size_t top_n{10};
};

/// Reads the given files ("-": standard input) in one merged pass and analyses
/// them; `observer` (may be null) sees every event as it is read. Files ending in
/// ".json" are out-of-memory snapshots; each log's own snapshots
/// ("<log>.oom-<n>.json") and stack table ("<log>.stacks") are read too. Perf maps
/// are looked for in `perf_map_dir`.
[[nodiscard]] report_data analyse_logs(std::vector<std::string> const& paths, std::size_t top_n,
                                       merged_event_observer* observer = nullptr,
                                       std::string const& perf_map_dir = "/tmp");

/// Names the call sites of `s` from the stack table at `table_path`.
[[nodiscard]] call_site_report name_call_sites(log_summary const& s, std::string const& table_path, symbolizer& sym);

/// One of a log's call-site lists, as every rendering shows it.
struct site_list {
  std::string_view key;        ///< JSON member: "leaks", "peak", "failures"
  std::string_view title;      ///< "never freed", "live at the peak", "failed allocations"
  std::string_view ranked_by;  ///< "by bytes", "by count"
  std::vector<named_site> const* sites;
  std::uint64_t total;  ///< call sites that have any (sites: the first top_n)
  std::uint64_t (*bytes)(call_site_stats const&);
  std::uint64_t (*count)(call_site_stats const&);
  std::string_view counted;  ///< what count() counts, plural: "allocations", "failures"
};
/// The leaks (allocations still live at the end of an incomplete log), the peak and
/// the failures, in that order.
[[nodiscard]] std::array<site_list, 3> site_lists(log_summary const& s, call_site_report const& c);
/// "12 stacks recorded in run.csv.stacks", or "no stack table (run.csv.stacks is
/// missing): stack ids only" (paths as written: escape the sentence for the output).
[[nodiscard]] std::string stack_table_note(call_site_report const& c);
/// "without a recorded stack (sampled out): 1.00 MiB at the peak, 0 B at the end, 3
/// of 10 allocations"; empty when every allocation and failure has a stack.
[[nodiscard]] std::string unattributed_note(log_summary const& s, call_site_report const& c);
/// A call site's frames as a text rendering lists them, one "#k  frame" line each
/// after `indent`: the innermost frames_shown, then the innermost few Python frames
/// below them (a program's own code often sits under a framework's native frames),
/// then how many are left out.
[[nodiscard]] std::string frame_lines(std::vector<symbol> const& frames, std::string_view indent);

/// Reads an out-of-memory snapshot, its text made; throws std::runtime_error when it
/// is not one.
[[nodiscard]] oom_snapshot read_snapshot(std::string const& path, symbolizer& sym);
/// A named frame as JSON: {"address","kind","function","file","line","module","offset"}.
[[nodiscard]] std::string frame_json(symbol const& f);

[[nodiscard]] std::string text_report(report_data const& r);
[[nodiscard]] std::string json_report(report_data const& r);
[[nodiscard]] std::string html_report(report_data const& r);

/// "14:02:08.000000 (+0.877 s)" from the Time column and the log's start, or "+0.877 s".
[[nodiscard]] std::string describe_when(log_position const& at, std::int64_t start_ns);

/// One row of the table that sets several logs side by side: what it shows, each
/// log's value (report_data::logs order) and the combined one ("" where a sum
/// means nothing).
struct comparison_row {
  std::string label;
  std::vector<std::string> per_log;
  std::string combined;
};
/// The rows of that table (r.combined must be set), numbers made readable.
[[nodiscard]] std::vector<comparison_row> comparison_rows(report_data const& r);

/// What allocations still live at the end of `s` are called: "never freed" in a
/// complete log; in an incomplete one they may have been freed in the lost rows.
[[nodiscard]] std::string_view live_at_end_title(log_summary const& s);

}  // namespace gpumem::tools
