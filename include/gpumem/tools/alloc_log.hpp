#pragma once
// Reading gpumem / RMM allocation logs (CSV) for the post-mortem tools.
//
// Two dialects share one reader; columns are found by NAME in the header, and
// columns the reader does not know are ignored:
//   RMM:    Thread,Time,Action,Pointer,Size,Stream
//   gpumem: Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result
//           (+ Reserved, written by later shim versions)
// Required: Action, Pointer, Size and a clock (TimeNs or Time). Thread and Stream
// default to 0 when absent.
//
// Time: TimeNs (wall clock, ns since the epoch) when present. Otherwise the
// local time of day in Time (HH:MM:SS.ffffff) with a day added each time the
// clock goes back by more than one hour (midnight wrap-around); smaller steps back
// are threads racing to the log, not a new day.
//
// Lines starting with '#' are metadata, not data. The shim ends a log that lost
// rows (disk full, truncated under it) with one line
//   #gpumem incomplete,dropped_rows=<N>,reason=<short text>
// (no other commas; the last such line counts); such a log is incomplete, and
// leaks or peaks read from it are not to be trusted (csv_log_writer.hpp).
//
// Damage is reported, never fatal for the rest of the file: each bad line becomes a
// diagnostic naming file:line and the problem, and is skipped. A process killed
// while logging leaves trailing NUL bytes (ignored) and/or a last line without its
// newline (reported as truncated and skipped). Only an unreadable file or an
// unusable header makes the whole log unreadable.
//
// Thread safety: the functions are reentrant; a parsed_log is a plain value.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::tools {

enum class log_action : std::uint8_t { allocate, free, allocate_failure };

/// The text of an action as it appears in the log ("allocate failure").
[[nodiscard]] std::string_view to_string(log_action a) noexcept;

/// One data line of a log. Optional columns hold the "absent" value noted.
struct log_event {
  std::int64_t time_ns{};        ///< TimeNs, or derived from Time (see file comment)
  std::int64_t clock_us{-1};     ///< Time column as microseconds since midnight; -1 if absent
  std::uint64_t pointer{};       ///< 0 for (nil)
  std::uint64_t size{};          ///< requested bytes
  std::uint64_t stream{};        ///< handle as written (0 = null stream)
  std::uint64_t thread{};
  std::int64_t duration_ns{-1};  ///< DurationNs; -1 if absent
  std::int64_t reserved{-1};     ///< Reserved (bytes held from the device); -1 if absent
  std::uint32_t line{};          ///< 1-based line number in the file
  std::uint16_t entry{};         ///< index into parsed_log::strings (0 = "")
  std::uint16_t result{};        ///< index into parsed_log::strings (0 = "")
  std::int16_t device{-1};       ///< Device; -1 if absent
  log_action action{};
};

/// A problem found in a log, anchored to file:line (line 0: the file as a whole).
struct log_diagnostic {
  std::string file;
  std::size_t line{};
  std::string message;
  /// "file:line: message" (or "file: message" for line 0).
  [[nodiscard]] std::string text() const;
};

/// Which optional columns the header named.
struct log_columns {
  bool time{}, time_ns{}, thread{}, stream{}, device{}, entry{}, duration{}, result{}, reserved{};
  std::size_t count{};  ///< fields per line, as the header has them
};

struct parsed_log {
  std::string path;
  bool readable{};                        ///< false: `fatal` says why, nothing else is valid
  std::optional<log_diagnostic> fatal;
  log_columns columns;
  std::vector<log_event> events;          ///< in file order
  std::vector<std::string> strings{""};   ///< interned Entry/Result texts; [0] is ""
  std::vector<log_diagnostic> warnings;   ///< first max_kept_warnings, file order
  std::size_t warning_count{};            ///< all of them, kept or not
  std::size_t lines{};                    ///< lines read, header included

  static constexpr std::size_t max_kept_warnings = 1000;

  /// "gpumem" when the log has the gpumem columns (TimeNs), else "rmm".
  [[nodiscard]] std::string_view dialect() const noexcept { return columns.time_ns ? "gpumem" : "rmm"; }
  [[nodiscard]] std::string_view string(std::uint16_t id) const noexcept { return strings[id]; }
};

/// Parses a whole log held in memory; `name` is used in diagnostics.
[[nodiscard]] parsed_log parse_log(std::string_view text, std::string name);

/// Reads and parses the file at `path` (unreadable file: readable == false).
[[nodiscard]] parsed_log read_log(std::string const& path);

/// Parses "HH:MM:SS[.fraction]" into nanoseconds since midnight.
[[nodiscard]] std::optional<std::int64_t> parse_time_of_day(std::string_view s) noexcept;

/// Formats microseconds since midnight (any day) as "HH:MM:SS.ffffff".
[[nodiscard]] std::string format_time_of_day(std::int64_t clock_us);

}  // namespace gpumem::tools
