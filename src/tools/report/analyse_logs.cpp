#include "report.hpp"

#include "units.hpp"

#include <gpumem/tools/log_reader.hpp>

#include <fmt/format.h>

#include <memory>

namespace gpumem::tools {

report_data analyse_logs(std::vector<std::string> const& paths, std::size_t top_n, merged_event_observer* observer) {
  report_data r;
  r.top_n = top_n;
  std::vector<std::unique_ptr<log_reader>> readers;
  std::vector<log_reader*> readable;
  for (auto const& path : paths) {
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

std::string incomplete_reason(log_summary const& s) {
  if (s.complete()) return {};
  auto const& m = *s.incomplete;
  std::string what = m.dropped_rows ? fmt::format("{} row{} dropped", *m.dropped_rows,
                                                  *m.dropped_rows == 1 ? " was" : "s were")
                                    : std::string{"rows were dropped"};
  if (!m.reason.empty()) what += fmt::format(" ({})", m.reason);
  return what;
}

}  // namespace gpumem::tools
