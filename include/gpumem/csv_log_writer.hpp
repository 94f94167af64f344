#pragma once
// csv_log_writer: the allocation log (log_row.hpp has its columns). Rows are queued
// in its journal (row_journal.hpp) and written by a helper thread; rows the
// journal cannot take (a forked child, after exit) are written at once.
//
// The CSV is only ever written with write(2) on an O_APPEND descriptor, never
// mapped, so nothing done to it can raise a signal in the program: a truncated
// log goes on at its new end, behind the header and a marker line; a renamed one
// keeps its rows; a deleted one (or its folder) is said once, and the rows lost
// after it are counted at exit; a second process on the same path writes
// "<path>.<pid>"; a full disk or RLIMIT_FSIZE (never exceeded: SIGXFSZ) drops rows
// and counts them. A log that lost rows or was truncated ends with
// "#gpumem incomplete,dropped_rows=<N>,reason=<text>" (docs/design/log.md).
//
// Thread safety: write() from any thread; close() not concurrently with write().

#include <gpumem/log_row.hpp>

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace gpumem {

class row_journal;

class csv_log_writer {
 public:
  /// Receives one line of news about the log (no trailing newline): the path was
  /// taken, rows are dropped, the file was truncated or deleted.
  using notify_fn = void (*)(std::string_view line) noexcept;
  /// The default notifier: the line at warn level through gpumem's diagnostics.
  static void notify_stderr(std::string_view line) noexcept;

  /// Creates (or empties) `path` ("<path>.<pid>" if another writer holds it),
  /// writes the header and makes the journal (if it cannot, says so and writes
  /// rows directly). Throws logic_error naming the path and the reason when it
  /// cannot be opened, is not a regular file, or cannot hold the header.
  explicit csv_log_writer(std::string path, notify_fn notifier = &notify_stderr);
  ~csv_log_writer();
  csv_log_writer(csv_log_writer const&) = delete;
  csv_log_writer& operator=(csv_log_writer const&) = delete;

  /// Logs `row` (its time_ns and duration_ns in ns).
  void write(log_row const& row) noexcept;
  /// Logs a row from `start_ticks` to `end_ticks` (detail::log_ticks(); 0: not
  /// measured); row.time_ns, duration_ns and utc_offset_s are not read.
  void write(log_row const& row, std::uint64_t start_ticks, std::uint64_t end_ticks) noexcept;
  /// The journal (null when there is none), for tests and benchmarks.
  [[nodiscard]] row_journal* journal() const noexcept { return journal_.get(); }

  /// Formats every queued row into the file now.
  void flush() noexcept;
  /// Formats what is queued, removes the journal, writes the final marker if rows
  /// were lost, closes the file. Idempotent.
  void close() noexcept;

  /// Appends whole lines (`rows` of them), repairing a truncation first;
  /// `on_reserved(context, offset)` is told where they go before they are
  /// written. False when they were not all stored (closed, or counted dropped).
  using reserved_fn = void (*)(void* context, std::uint64_t offset) noexcept;
  bool append(char const* data, std::size_t len, std::uint64_t rows, reserved_fn on_reserved = nullptr,
              void* context = nullptr) noexcept;
  /// Counts `rows` lost before they reached the writer (for the marker).
  void count_lost(std::uint64_t rows) noexcept;

  /// The file written: requested_path(), or "<requested_path>.<pid>".
  [[nodiscard]] std::string const& path() const noexcept { return path_; }
  [[nodiscard]] std::string const& requested_path() const noexcept { return requested_path_; }
  /// Rows that could not be stored (disk full, lost records).
  [[nodiscard]] std::uint64_t dropped_rows() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  /// Times the file was found truncated under the writer.
  [[nodiscard]] std::uint32_t truncations() const noexcept { return truncations_.load(std::memory_order_relaxed); }

 private:
  void open_file();
  // *_locked: the caller holds mutex_.
  /// The file's end, after repairing a truncation (header and marker first);
  /// `cut_to`: the size found, when it repaired one.
  std::uint64_t end_locked(std::int64_t& cut_to) noexcept;
  /// Writes `len` bytes (whole lines) at the end; the bytes written.
  std::size_t write_locked(char const* data, std::size_t len) noexcept;
  /// True when the `done` bytes just written for end `at` landed before it (a cut
  /// between the size read and the write): they are removed, to be written again.
  bool take_back_cut_write_locked(std::uint64_t at, std::size_t done) noexcept;
  [[nodiscard]] std::string loss_reason_locked() const;  ///< for the marker and messages
  void append_marker_locked() noexcept;
  void drop_locked(std::uint64_t rows, int err) noexcept;
  /// The queued rows formatted and the marker written (close and exit).
  void finish() noexcept;
  static void finish_all_at_exit() noexcept;
  void notify(std::string const& line) const noexcept;

  std::string requested_path_;
  std::string path_;
  notify_fn notify_;
  int fd_{-1};
  int owner_pid_{};
  std::unique_ptr<row_journal> journal_;
  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;  ///< one append at a time
  std::uint64_t end_{};                                ///< the file's end after our last write (mutex_)
  std::uint64_t reserved_{};  ///< disk blocks reserved up to here (mutex_); UINT64_MAX: fallocate unsupported
  int drop_errno_{};          ///< why rows were dropped (mutex_)
  bool drop_said_{false};     ///< (mutex_)
  bool finished_{false};      ///< the final marker is written (mutex_)
  bool closed_{false};        ///< (mutex_)
  bool gone_{false};          ///< the file was deleted (mutex_)
  bool gone_said_{false};     ///< (mutex_)
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint32_t> truncations_{0};
  csv_log_writer* next_live_{};  ///< on the live writers' list, for exit and fork
};

}  // namespace gpumem
