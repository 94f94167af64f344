#pragma once
// csv_log_writer: the allocation log (log_row.hpp has its columns), written so
// that a crash loses no completed row and nothing done to the file can harm the
// program.
//
// Rows: a row becomes a 64-byte record in the log's journal, "<path>.journal"
// (row_journal.hpp): a file mapped by gpumem alone, so the record outlives the
// process (SIGKILL, SIGSEGV, abort) the moment the call that logged it returns.
// A helper thread formats the records, in order, into the CSV in batches. The
// calling thread makes no system call. After a crash the last rows (at most
// about 64 ms of them) are still in the journal; recover_journal() adds them to
// the CSV, and gpumem-report and gpumem-replay call it before they read a log.
// Rows the journal cannot take (a forked child, after exit, no journal could be
// made) are formatted and written at once, by the calling thread.
//
// The CSV itself is only ever written with write(2) on an O_APPEND descriptor,
// never mapped, so what others do to it cannot raise a signal in the program:
// - Truncated while in use (": > log", logrotate's copytruncate): the next batch
//   finds the file shorter than written (one fstat per batch) and goes on at its
//   new end, behind the header (when the cut took it) and a marker line that
//   says the earlier rows are gone; the notifier says so once per truncation.
//   A cut between that check and the write is found at the next batch.
// - Renamed: rows keep going to the open file.
// - Deleted (or its folder): found at the next batch (the fstat); the notifier
//   says so once, later rows are counted as lost, and at close or exit the
//   notifier gives their count (no marker: no one could read it).
// - Another process writes the same path: the first writer holds an exclusive
//   flock; a writer that finds it taken writes "<path>.<pid>" instead and says
//   so. A forked child shares its parent's descriptor: whole rows, appended.
// - Disk full, quota, RLIMIT_FSIZE: rows that cannot be written are dropped and
//   counted; the notifier says so once; a marker line says so at once (room is
//   kept for it under RLIMIT_FSIZE, never passed: that would raise SIGXFSZ) and
//   again, with the final count, at close or exit.
// The marker, "#gpumem incomplete,dropped_rows=<N>,reason=<text>", counts the
// rows the writer lost (a truncation's erased rows are not counted: the reason
// names it). A log that lost nothing ends with no marker.
//
// Thread safety: write() from any number of threads; close() (and the
// destructor) not concurrently with write() on other threads. At exit the
// queued rows are formatted and the marker written; rows logged later (other
// threads, static destructors) are written directly.

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
  /// taken, rows start being dropped, the file was truncated, the log is
  /// incomplete (at close). Never called from a signal handler.
  using notify_fn = void (*)(std::string_view line) noexcept;
  /// The default notifier: the line at warn level through gpumem's diagnostics.
  static void notify_stderr(std::string_view line) noexcept;

  /// Creates (or empties) `path`, writes the header and makes the journal; if
  /// another writer holds `path`, uses "<path>.<pid>". Throws logic_error naming
  /// the path and the reason when it cannot be opened, is not a regular file, or
  /// cannot hold the header. A journal that cannot be made is said through the
  /// notifier; rows are then written directly.
  explicit csv_log_writer(std::string path, notify_fn notifier = &notify_stderr);
  ~csv_log_writer();
  csv_log_writer(csv_log_writer const&) = delete;
  csv_log_writer& operator=(csv_log_writer const&) = delete;

  /// Logs `row` (its time_ns and duration_ns in ns). Never throws.
  void write(log_row const& row) noexcept;
  /// Logs a row that started at `start_ticks` (detail::log_ticks()) and ended at
  /// `end_ticks` (0: its duration was not measured); row.time_ns, duration_ns and
  /// utc_offset_s are not read.
  void write(log_row const& row, std::uint64_t start_ticks, std::uint64_t end_ticks) noexcept;
  /// The journal, for a caller that queues rows itself (row_journal::push, and
  /// write() when that answers false); null when there is none.
  [[nodiscard]] row_journal* journal() const noexcept { return journal_.get(); }

  /// Formats every queued row into the file now.
  void flush() noexcept;
  /// Formats what is queued, removes the journal, writes the final marker if rows
  /// were lost, closes the file. Idempotent.
  void close() noexcept;

  /// Appends whole lines (`rows` of them) at the end of the file, repairing a
  /// truncation first; `on_reserved(context, offset)` is told where they go
  /// before they are written. False when they were not (all) stored (closed, or
  /// counted as dropped).
  using reserved_fn = void (*)(void* context, std::uint64_t offset) noexcept;
  bool append(char const* data, std::size_t len, std::uint64_t rows, reserved_fn on_reserved = nullptr,
              void* context = nullptr) noexcept;
  /// Counts `rows` lost before they reached the writer (journal records whose
  /// writer never finished them): the marker reports them.
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
  /// Under mutex_: the file's end now, after repairing a truncation (the header
  /// and a marker go first); sets `cut_to` to the size found when it repaired one.
  std::uint64_t end_locked(std::int64_t& cut_to) noexcept;
  /// Under mutex_: writes `len` bytes (whole lines) at the end; the bytes written.
  std::size_t write_locked(char const* data, std::size_t len) noexcept;
  /// Under mutex_: true when the `done` bytes just written for end `at` landed
  /// before it (the file was cut between the size read and the write); they are
  /// removed again, for end_locked to repair the cut before they are rewritten.
  bool take_back_cut_write_locked(std::uint64_t at, std::size_t done) noexcept;
  /// Under mutex_: why rows are missing, for the marker and the messages.
  [[nodiscard]] std::string loss_reason_locked() const;
  /// Under mutex_: appends the marker line for the counters now.
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
