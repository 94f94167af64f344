#pragma once
// gpumem-report's renderings of analysed logs: text (terminal), JSON (machines,
// tests), HTML (one self-contained page) and PNG (timeline plot); the Chrome trace
// is written during the pass instead (trace_writer.hpp).
// All renderings are pure functions of a report_data.

#include <gpumem/tools/log_analysis.hpp>
#include <gpumem/tools/log_event.hpp>
#include <gpumem/tools/log_merge.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace gpumem::tools {

struct report_data {
  std::vector<log_summary> logs;               ///< readable logs, command-line order
  std::vector<log_diagnostic> unreadable;      ///< why the other logs could not be read
  std::optional<combined_summary> combined;    ///< only with two or more readable logs
  std::size_t top_n{10};
};

/// Reads the given files ("-": standard input) in one merged pass and analyses
/// them; `observer` (may be null) sees every event as it is read.
[[nodiscard]] report_data analyse_logs(std::vector<std::string> const& paths, std::size_t top_n,
                                       merged_event_observer* observer = nullptr);

[[nodiscard]] std::string text_report(report_data const& r);
[[nodiscard]] std::string json_report(report_data const& r);
[[nodiscard]] std::string html_report(report_data const& r);

/// Timeline plot (live bytes over time, reserved where logged) as PNG bytes.
[[nodiscard]] std::string png_report(report_data const& r, int width = 1000, int height = 500);

/// "14:02:08.000000 (+0.877 s)" from the Time column and the log's start, or "+0.877 s".
[[nodiscard]] std::string describe_when(log_position const& at, std::int64_t start_ns);

/// What allocations still live at the end of `s` are called: "never freed" in a
/// complete log; in an incomplete one they may have been freed in the lost rows.
[[nodiscard]] std::string_view live_at_end_title(log_summary const& s);

/// One sentence on why `s` is incomplete ("1234 rows were dropped (disk full)").
[[nodiscard]] std::string incomplete_reason(log_summary const& s);

}  // namespace gpumem::tools
