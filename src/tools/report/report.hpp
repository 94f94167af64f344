#pragma once
// gpumem-report's renderings of analysed logs: text (terminal), JSON (machines,
// tests), HTML (one self-contained page) and PNG (timeline plot).
// All of them are pure functions of a report_data.

#include <gpumem/tools/alloc_log.hpp>
#include <gpumem/tools/log_analysis.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace gpumem::tools {

struct analysed_log {
  parsed_log log;       ///< readable
  log_summary summary;  ///< analyze(log, top_n)
};

struct report_data {
  std::vector<analysed_log> logs;              ///< readable logs, command-line order
  std::vector<log_diagnostic> unreadable;      ///< why the other logs could not be read
  std::optional<combined_summary> combined;    ///< only with two or more readable logs
  std::size_t top_n{10};
};

/// Reads, analyses and (for several logs) combines the given files.
[[nodiscard]] report_data build_report(std::vector<std::string> const& paths, std::size_t top_n);

[[nodiscard]] std::string text_report(report_data const& r);
[[nodiscard]] std::string json_report(report_data const& r);
[[nodiscard]] std::string html_report(report_data const& r);

/// Timeline plot (live bytes over time, reserved where logged) as PNG bytes.
[[nodiscard]] std::string png_report(report_data const& r, int width = 1000, int height = 500);

/// "14:02:08.000000 (+0.877 s)" from the Time column and the log's start, or "+0.877 s".
[[nodiscard]] std::string describe_when(log_position const& at, std::int64_t start_ns);

/// Escapes &, <, >, " and ' for HTML text and attributes.
[[nodiscard]] std::string html_escape(std::string_view s);

}  // namespace gpumem::tools
