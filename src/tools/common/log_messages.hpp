#pragma once
// What gpumem-report and gpumem-replay say about a log they read, the same way:
// its warnings on standard error (the first few, then how many more), why it is
// incomplete, and the file name a table or plot shows for it.
//
// Thread safety: pure functions; print_warnings writes to stderr.

#include "log_event.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace gpumem::tools {

/// Warnings printed per log; the rest are counted.
inline constexpr std::size_t warnings_shown_per_log = 20;

/// "warning: <file:line: problem>" for the first warnings_shown_per_log of `log`'s
/// warnings, then "warning: <path>: N more warnings not shown", escaped for a terminal.
void print_warnings(log_file_info const& log);

/// One phrase on the rows an incomplete log lost: "1234 rows were dropped (disk full)",
/// "1 row was dropped", "rows were dropped" (the marker's text as written: escape it
/// for the output).
[[nodiscard]] std::string incomplete_reason(incomplete_marker const& m);

/// The last component of a path ("run/alloc-0.csv" -> "alloc-0.csv").
[[nodiscard]] std::string_view base_name(std::string_view path) noexcept;

}  // namespace gpumem::tools
