#include "report.hpp"

#include "units.hpp"

#include <fmt/format.h>

namespace gpumem::tools {

report_data build_report(std::vector<std::string> const& paths, std::size_t top_n) {
  report_data r;
  r.top_n = top_n;
  for (auto const& path : paths) {
    parsed_log log = read_log(path);
    if (!log.readable) {
      r.unreadable.push_back(*log.fatal);
      continue;
    }
    log_summary summary = analyze(log, top_n);
    r.logs.push_back({std::move(log), std::move(summary)});
  }
  if (r.logs.size() > 1) {
    std::vector<log_summary const*> summaries;
    summaries.reserve(r.logs.size());
    for (auto const& l : r.logs) summaries.push_back(&l.summary);
    r.combined = combine(summaries);
  }
  return r;
}

std::string describe_when(log_position const& at, std::int64_t start_ns) {
  std::string const rel = "+" + human_duration(at.time_ns - start_ns);
  if (at.clock_us < 0) return rel;
  return fmt::format("{} ({})", format_time_of_day(at.clock_us), rel);
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace gpumem::tools
