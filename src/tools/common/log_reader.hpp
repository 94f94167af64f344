#pragma once
// Reading gpumem / RMM allocation logs (CSV) for the post-mortem tools, one event
// at a time: memory is a fixed buffer (under 200 KiB) whatever the size of the
// log, so logs of tens of GB stream through (managed pointers aside, below).
//
// Two dialects share one reader; columns are found by NAME in the header, and
// columns the reader does not know are ignored:
//   RMM:    Thread,Time,Action,Pointer,Size,Stream
//   gpumem: Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result
//           (+ Reserved, then Stack, written by later shim versions)
// Required: Action, Pointer, Size and a clock (TimeNs or Time). Thread and Stream
// default to 0 when absent.
//
// Memory kind (log_event::memory): from the Entry (call_semantics.hpp), except for
// frees. Managed memory is freed by cudaFree / cuMemFree like device memory, so a
// free of a pointer the log allocated as managed, and has not freed since, is a
// managed free. The reader keeps those pointers (one per live managed allocation:
// the only memory that grows with the log), so every tool reading the log agrees.
//
// Time: TimeNs (wall clock, ns since the epoch) when present. Otherwise the
// local time of day in Time (HH:MM:SS.ffffff) with a day added each time the
// clock goes back by more than one hour (midnight wrap-around); smaller steps back
// are threads racing to the log, not a new day.
//
// Metadata: a line starting with '#' is never data. `#gpumem incomplete,...`
// marks a log whose writer dropped rows (see incomplete_marker); the last such
// line wins. Other '#' lines are ignored.
//
// Damage is reported, never fatal for the rest of the file: each bad line becomes a
// diagnostic naming file:line and the problem, and is skipped. NUL bytes are never
// data: a writer that died mid-row leaves the row cut short by NULs (reported as a
// torn row, and reading goes on after the NULs), and a killed writer leaves the
// file padded with NULs (ignored at the end). A last line without its newline is
// reported as truncated. A line longer than max_line_bytes is reported and
// skipped. Only an unreadable file or an unusable header makes the whole log
// unreadable; where the header should be, a line longer than max_line_bytes,
// or more NUL bytes than that, is unusable (and reading stops there: a source
// that never sends a newline, /dev/zero, is not read for ever).
//
// Thread safety: a reader is used by one thread at a time.

#include "log_event.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace gpumem::tools {

class log_reader {
 public:
  static constexpr std::size_t max_kept_warnings = 1000;
  static constexpr std::size_t max_line_bytes = std::size_t{64} << 10;
  /// Entry/Result texts kept per log (longer ones are cut), and distinct ones at most.
  static constexpr std::size_t max_string_bytes = 256;
  static constexpr std::size_t max_strings = 4096;

  /// Opens the file at `path` ("-": standard input) and reads its header. A log
  /// whose writer died with rows queued in "<path>.journal" is completed first
  /// (recover_journal, row_journal.hpp), with a warning that says so.
  explicit log_reader(std::string path);
  /// Reads a log held in memory, which must outlive the reader; `name` is used in
  /// diagnostics.
  log_reader(std::string_view text, std::string name);
  ~log_reader();
  log_reader(log_reader const&) = delete;
  log_reader& operator=(log_reader const&) = delete;

  /// False: `fatal()` says why; there are no events.
  [[nodiscard]] bool readable() const noexcept { return !fatal_; }
  [[nodiscard]] std::optional<log_diagnostic> const& fatal() const noexcept { return fatal_; }
  [[nodiscard]] std::string const& path() const noexcept { return path_; }
  [[nodiscard]] log_columns const& columns() const noexcept { return columns_; }
  /// "gpumem" when the log has the gpumem columns (TimeNs), else "rmm".
  [[nodiscard]] std::string_view dialect() const noexcept { return columns_.time_ns ? "gpumem" : "rmm"; }
  /// What was learned about the file so far (all of it once next() returned false).
  [[nodiscard]] log_file_info info() const;

  /// The next event in file order; false at the end of the log.
  bool next(log_event& ev);

  /// An interned Entry/Result text. It stays where it is (and NUL-terminated) for
  /// the reader's lifetime, whatever is read later.
  [[nodiscard]] std::string_view string(std::uint16_t id) const noexcept { return strings_[id]; }
  /// A copy of the interned texts; [0] is "".
  [[nodiscard]] std::vector<std::string> strings() const { return {strings_.begin(), strings_.end()}; }

  // What was read so far (all of it once next() returned false).
  [[nodiscard]] std::size_t lines() const noexcept { return lines_; }
  [[nodiscard]] std::uint64_t events() const noexcept { return events_; }
  [[nodiscard]] std::vector<log_diagnostic> const& warnings() const noexcept { return warnings_; }
  [[nodiscard]] std::size_t warning_count() const noexcept { return warning_count_; }
  [[nodiscard]] std::optional<incomplete_marker> const& incomplete() const noexcept { return incomplete_; }
  /// The log ends in NUL padding or a torn/truncated row: its writer stopped
  /// without closing it (killed, crashed, or still running).
  [[nodiscard]] bool ended_abruptly() const noexcept { return ended_abruptly_; }

 private:
  /// Adds the rows a dead writer left in "<path>.journal" to the log (a warning
  /// says so); see row_journal.hpp.
  void complete_from_journal();
  enum class line_end : std::uint8_t {
    newline,        ///< a complete line
    end_of_file,    ///< the file ends without a newline
    nul_then_more,  ///< cut short by NUL bytes, more data after them
    nul_then_end,   ///< cut short by NUL bytes that run to the end of the file
  };
  struct raw_line {
    std::string_view text;
    std::size_t line{};
    line_end end{};
    std::size_t nuls{};  ///< NUL bytes after the text (nul_then_*)
  };
  // A column by its place in log_column_names (log_row.hpp).
  using column_id = std::size_t;
  static constexpr column_id col_thread = column_index(log_column::thread);
  static constexpr column_id col_time = column_index(log_column::time);
  static constexpr column_id col_action = column_index(log_column::action);
  static constexpr column_id col_pointer = column_index(log_column::pointer);
  static constexpr column_id col_size = column_index(log_column::size);
  static constexpr column_id col_stream = column_index(log_column::stream);
  static constexpr column_id col_device = column_index(log_column::device);
  static constexpr column_id col_entry = column_index(log_column::entry);
  static constexpr column_id col_time_ns = column_index(log_column::time_ns);
  static constexpr column_id col_duration = column_index(log_column::duration_ns);
  static constexpr column_id col_result = column_index(log_column::result);
  static constexpr column_id col_reserved = column_index(log_column::reserved);
  static constexpr column_id col_stack = column_index(log_column::stack);
  static constexpr column_id col_unknown = csv_log_columns;
  static constexpr std::size_t no_column = ~std::size_t{0};

  /// Heterogeneous look-up: interning a field needs no std::string.
  struct string_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };

  void read_header();
  bool next_line(raw_line& out);
  bool refill();
  [[nodiscard]] std::size_t find_nul(std::size_t from) const noexcept;
  void seek(std::size_t pos) noexcept;
  /// False at the end of the data, or with fatal_ set (NULs past the bound before the header).
  bool skip_nul_run(std::size_t& count);
  /// False with fatal_ set: before the header, a long line ends the reading.
  bool skip_long_line();
  void read_metadata(std::string_view line, std::size_t line_no);
  bool read_row(std::string_view line, std::size_t line_no, log_event& ev);
  /// Keeps managed_live_ and marks the free of a live managed pointer as managed.
  void track_managed(log_event& ev);
  std::uint16_t intern(std::string_view s, std::uint16_t& last);
  void fail(std::size_t line, std::string msg);
  void warn(std::size_t line, std::string msg);
  [[nodiscard]] std::string_view field(column_id id) const noexcept { return fields_[index_[id]]; }

  std::string path_;
  std::optional<log_diagnostic> fatal_;
  log_columns columns_;

  // The window [pos_, end_) of data_ not yet consumed. For a file, data_ is
  // storage_ and refill() reads more; for text in memory, the whole text.
  int fd_ = -1;
  bool own_fd_ = false;
  std::unique_ptr<char[]> storage_;
  std::size_t capacity_ = 0;
  char const* data_ = nullptr;
  std::size_t pos_ = 0, end_ = 0;
  std::size_t next_nul_ = 0;  ///< first NUL at or after pos_ in the window (end_: none)
  bool eof_ = false;
  bool at_start_ = true;       ///< nothing consumed yet (a byte-order mark may follow)
  bool header_found_ = false;  ///< past the header: long lines and NUL runs are skipped, not fatal
  std::string torn_;           ///< a row cut short by NULs, kept while the NULs are skipped

  std::size_t line_no_ = 1;  ///< the line being read (newlines consumed + 1)
  std::size_t lines_ = 0;
  std::uint64_t events_ = 0;
  std::vector<log_diagnostic> warnings_;
  std::size_t warning_count_ = 0;
  std::optional<incomplete_marker> incomplete_;
  bool ended_abruptly_ = false;

  std::array<std::size_t, col_unknown> index_{};
  std::vector<std::string_view> fields_;
  std::deque<std::string> strings_{""};  // a deque: growing never moves a text
  std::unordered_map<std::string, std::uint16_t, string_hash, std::equal_to<>> string_ids_;
  std::uint16_t last_entry_ = 0, last_result_ = 0;
  std::uint32_t memory_memo_id_ = ~std::uint32_t{0};  ///< the entry id memory_memo_ answers for
  memory_kind memory_memo_ = memory_kind::device;     ///< memory_kind_of_entry() of that entry
  /// Managed allocations live so far: the frees of these pointers are managed frees.
  std::unordered_set<std::uint64_t> managed_live_;
  bool have_clock_ = false;
  std::int64_t last_tod_ns_ = 0;
  std::int64_t day_ns_ = 0;
};

/// A whole log read into memory: for tests and small logs only (the tools stream).
struct parsed_log : log_file_info {
  bool readable{};
  std::optional<log_diagnostic> fatal;
  std::vector<log_event> events;
};

/// Reads every event of a log held in memory.
[[nodiscard]] parsed_log parse_log(std::string_view text, std::string name);

}  // namespace gpumem::tools
