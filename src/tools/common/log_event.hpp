#pragma once
// What one line of an allocation log (CSV) says, as the post-mortem tools see it,
// and the problems a reader reports about a log.
//
// Thread safety: plain values and pure functions.

#include <gpumem/log_row.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::tools {

/// Which memory a row is about. Only device memory moves the device figures (peaks,
/// leaks, Reserved) and is replayed: pinned host memory and managed memory have
/// chains of their own in the shim, and the tools keep their rows apart.
enum class memory_kind : std::uint8_t {
  device,
  pinned_host,  ///< cudaHostAlloc, cudaMallocHost, their driver twins and frees, registration
  managed,      ///< cudaMallocManaged / cuMemAllocManaged, and the frees of their pointers
};

/// One data line of a log as the tools read it: the writer's log_row (the one
/// schema, log_row.hpp), as far as the line gives it, and what only a reader has:
/// where the line was, and its Entry and Result texts as indices into the
/// reader's strings (log_row::entry and ::result stay null: a reader's texts live
/// only as long as it does). A column the log lacks keeps log_row's default:
/// device -1, duration_ns unmeasured, reserved -1, stack 0, thread_id 0;
/// utc_offset_s is not known (0).
struct log_event : log_row {
  std::int64_t clock_us{-1};  ///< Time column as microseconds since midnight; -1 if absent
  std::uint64_t index{};      ///< 0-based position among the log's events
  std::uint32_t line{};       ///< 1-based line number in the file
  std::uint16_t entry_id{};   ///< index into the reader's strings (0 = "")
  std::uint16_t result_id{};  ///< index into the reader's strings (0 = "")
  /// A free whose Result names an error (CUDA refused it: the memory stays
  /// allocated). The tools' books ignore it.
  bool refused{};
  /// Set by the reader (log_reader.hpp says how): anything but device memory is kept
  /// apart in the books, and not replayed.
  memory_kind memory{};
  [[nodiscard]] bool device_memory() const noexcept { return memory == memory_kind::device; }
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
  bool time{}, time_ns{}, thread{}, stream{}, device{}, entry{}, duration{}, result{}, reserved{}, stack{};
  std::size_t count{};  ///< fields per line, as the header has them
};

/// The log's own statement that rows are missing: a metadata line
/// `#gpumem incomplete,dropped_rows=<N>,reason=<text>` (the last one wins).
struct incomplete_marker {
  std::optional<std::uint64_t> dropped_rows;  ///< empty when the marker does not say
  std::string reason;                         ///< "" when the marker does not say
  std::size_t line{};
};

/// What reading a log found out about the file, apart from its events: the same
/// for a log streamed (log_reader::info), read whole (parsed_log) or analysed
/// (log_summary).
struct log_file_info {
  std::string path;
  log_columns columns;
  std::size_t lines{};
  std::vector<std::string> strings{""};  ///< Entry/Result texts the events index; [0] is ""
  std::vector<log_diagnostic> warnings;  ///< the first ones (log_reader::max_kept_warnings)
  std::size_t warning_count{};
  std::optional<incomplete_marker> incomplete;
  bool ended_abruptly{};  ///< NUL padding or a torn last row at the end

  /// "gpumem" when the log has the gpumem columns (TimeNs), else "rmm".
  [[nodiscard]] std::string_view dialect() const noexcept { return columns.time_ns ? "gpumem" : "rmm"; }
  [[nodiscard]] std::string_view string(std::uint16_t id) const noexcept { return strings[id]; }
  /// No rows are known to be missing.
  [[nodiscard]] bool complete() const noexcept { return !incomplete; }
};

/// Parses "HH:MM:SS[.fraction]" into nanoseconds since midnight.
[[nodiscard]] std::optional<std::int64_t> parse_time_of_day(std::string_view s) noexcept;

/// Formats microseconds since midnight (any day) as "HH:MM:SS.ffffff".
[[nodiscard]] std::string format_time_of_day(std::int64_t clock_us);

}  // namespace gpumem::tools
