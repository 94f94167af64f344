#include "log_messages.hpp"

#include "text_escape.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace gpumem::tools {

void print_warnings(log_file_info const& log) {
  std::size_t const shown = std::min(log.warnings.size(), warnings_shown_per_log);
  for (std::size_t i = 0; i < shown; ++i) fmt::print(stderr, "warning: {}\n", escape_text(log.warnings[i].text()));
  if (log.warning_count > warnings_shown_per_log) {
    fmt::print(stderr, "warning: {}: {} more warnings not shown\n", escape_text(log.path),
               log.warning_count - warnings_shown_per_log);
  }
}

std::string incomplete_reason(incomplete_marker const& m) {
  std::string what = m.dropped_rows
                         ? fmt::format("{} row{} dropped", *m.dropped_rows, *m.dropped_rows == 1 ? " was" : "s were")
                         : std::string{"rows were dropped"};
  if (!m.reason.empty()) what += fmt::format(" ({})", m.reason);
  return what;
}

std::string_view base_name(std::string_view path) noexcept {
  auto const slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace gpumem::tools
