#pragma once
// The allocation log's schema: the one row type, action enum and column list that
// the writer, its journal, the shim and the post-mortem tools all use. RMM's
// columns first, in RMM's formats (its replay tool reads the file), then gpumem's:
//   Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result,Reserved,Stack
//   140245,14:02:07.123456,allocate,0x7f3a40000000,1048576,0x1,0,cudaMalloc,1763733727123456789,412,CUDA_SUCCESS,2097152,9c1e07a2f3b4d5e6
//   Thread      OS thread id             Time      local HH:MM:SS.ffffff
//   Action      allocate | allocate failure | free
//   Pointer     %p style, "(nil)" for null (a cuMemCreate row: the handle)
//   Size        bytes requested          Stream    "0" for null, else 0x-hex
//   Device      ordinal, -1 unknown      Entry     entry point, or allocate/free
//   TimeNs      CLOCK_REALTIME ns (comparable across processes and ranks)
//   DurationNs  empty when not measured (a call served from the free lists)
//   Result      CUDA_SUCCESS or the error's name
//   Reserved    bytes the chain held from the device after the event; empty: unknown
//   Stack       id (hex, no 0x) of the calling stack in "<log>.stacks"; empty: none
// Lines starting with '#' are metadata, such as the marker of a log that lost rows
// (the last one counts):
//   #gpumem incomplete,dropped_rows=<N>,reason=<text>
// Readers find columns by name: RMM's own logs have the first six only.
//
// Thread safety: plain values and pure functions.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace gpumem {

enum class log_action : std::uint8_t { allocate, allocate_failure, free };

/// The Action column's text ("allocate failure").
[[nodiscard]] constexpr std::string_view action_name(log_action a) noexcept {
  switch (a) {
    case log_action::allocate_failure: return "allocate failure";
    case log_action::free: return "free";
    default: return "allocate";
  }
}

/// The action an Action column names; nothing for any other text.
[[nodiscard]] constexpr std::optional<log_action> parse_action(std::string_view s) noexcept {
  for (auto const a : {log_action::allocate, log_action::allocate_failure, log_action::free}) {
    if (s == action_name(a)) return a;
  }
  return std::nullopt;
}

/// The columns, in the order the writer puts them.
enum class log_column : std::uint8_t {
  thread,
  time,
  action,
  pointer,
  size,
  stream,
  device,
  entry,
  time_ns,
  duration_ns,
  result,
  reserved,
  stack,
};
inline constexpr std::size_t csv_log_columns = 13;
[[nodiscard]] constexpr std::size_t column_index(log_column c) noexcept { return static_cast<std::size_t>(c); }
inline constexpr std::array<std::string_view, csv_log_columns> log_column_names{
    "Thread", "Time",   "Action",     "Pointer", "Size",     "Stream", "Device",
    "Entry",  "TimeNs", "DurationNs", "Result",  "Reserved", "Stack"};
/// The header line: log_column_names joined by commas, then '\n'.
inline constexpr std::string_view csv_log_header =
    "Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result,Reserved,Stack\n";
static_assert([] {
  std::size_t at = 0;
  for (std::size_t i = 0; i < csv_log_columns; ++i) {
    auto const name = log_column_names[i];
    if (csv_log_header.substr(at, name.size()) != name) return false;
    at += name.size();
    if (at >= csv_log_header.size() || csv_log_header[at++] != (i + 1 < csv_log_columns ? ',' : '\n')) return false;
  }
  return at == csv_log_header.size();
}());

/// Start of the incompleteness marker line.
inline constexpr std::string_view csv_log_incomplete_prefix = "#gpumem incomplete,";
/// Longest marker line format_incomplete_marker() writes, '\n' included.
inline constexpr std::size_t max_marker_bytes = 192;

/// One event.
struct log_row {
  /// duration_ns of a call whose duration was not measured.
  static constexpr std::uint64_t unmeasured = ~std::uint64_t{0};

  std::uint64_t thread_id{};
  std::int64_t time_ns{};       ///< CLOCK_REALTIME
  std::int32_t utc_offset_s{};  ///< local time = time_ns + offset (Time column)
  log_action action{log_action::allocate};
  std::uintptr_t pointer{};  ///< 0: null
  std::size_t size{};
  std::uintptr_t stream{};
  int device{-1};
  /// nullptr: "allocate"/"free" from the action. A string that never changes (a
  /// literal): the formatter and the journal remember it by address.
  const char* entry{};
  std::uint64_t duration_ns{unmeasured};  ///< unmeasured: empty DurationNs
  const char* result{};                   ///< nullptr: "CUDA_SUCCESS"; as entry
  std::int64_t reserved{-1};              ///< Reserved column; negative: unknown (empty)
  std::uint64_t stack{};                  ///< Stack column; 0: none (empty)
};

/// Longest row format_row() can produce (entry and result are cut to 64 chars).
inline constexpr std::size_t max_row_bytes = 384;

/// Formats `row` as one CSV line ending in '\n' into `out` (at least
/// max_row_bytes), returns its length. Pure: no locale, no allocation, no
/// syscalls. Commas, quotes and control characters in entry/result become '_'.
std::size_t format_row(char* out, log_row const& row) noexcept;

/// Formats the incompleteness marker, "#gpumem incomplete,dropped_rows=<dropped>,
/// reason=<reason>\n", into `out` (`capacity` bytes), returns its length. Commas
/// and line breaks in `reason` become spaces; a reason too long is cut. 0 when
/// `capacity` cannot hold the line without its reason.
std::size_t format_incomplete_marker(char* out, std::size_t capacity, std::uint64_t dropped,
                                     std::string_view reason) noexcept;

}  // namespace gpumem
