#pragma once
// row_journal: a csv_log_writer's rows queued for its helper thread, kept in a
// file so that a crash loses none of them.
//
// A row becomes one 64-byte binary record in a ring mapped from "<log>.journal"
// (MAP_SHARED: once stored, the record is in the page cache and outlives the
// process, SIGKILL included). A helper thread ("gpumem-logfmt") formats the
// records, in ring order, into the CSV in batches of up to 32 KiB
// (csv_log_writer::append). The ring's 4 MiB are allocated and mapped writable
// up front and reused lap after lap, so the calling thread makes no system call
// and takes no page fault.
//
// Cost on the calling thread: one fetch_add on the ring's head, a 64-byte store
// (the line eight records ahead is fetched for writing meanwhile: the formatter
// read it a lap ago, and a store that missed would hold up the next locked
// instruction), a relaxed load of the journal's state, and, once per
// ring_slots/8 rows, a futex wake of the helper. A row pushed with its start and
// end counter values (as the shim does) is not even converted to the wall clock
// there: the formatter converts it, with an anchor it also keeps in the
// journal's header for recovery.
//
// Ordering: rows reach the CSV in the order their records were reserved.
//
// A full ring (the helper fell behind): the calling thread formats the oldest
// records itself (one thread at a time) until its record has room. A record
// reserved but not stored for 1 s (its thread stopped between the two) is given
// up, counted as lost in the log's marker.
//
// After a crash the CSV lacks the rows still in the ring (at most 64 ms of them
// while the helper keeps up: it looks at least every 64 ms); so does a process
// that ends with _exit() or quick_exit(), which skip the exit hook that formats
// what is left. recover_journal() appends them: gpumem-report and gpumem-replay
// call it on the logs they read, and say so. Records carry the entry-point and
// result names as indices into a name table in the journal's header, so
// recovery needs nothing from the dead process.
//
// The journal is gpumem's own file, as private as the program's memory: another
// program that truncates it while the program runs makes the ring's pages
// vanish, and a store there raises SIGBUS like any access to a truncated
// mapping. That is out of scope; the CSV is the file to rotate.
//
// Not queued (push() answers false and the caller writes the row directly): in
// a forked child (the ring is the parent's), after stop_queuing() or close(),
// rows whose fields do not fit a record (a duration of 2^32 - 1 ns or more, or as
// many counter ticks, about 1.4 s at 3 GHz, for a row pushed in ticks; a thread
// id of 2^32 - 1 or more; a device past 127, more than 255 distinct names or one
// of 64 characters or more). Such a row may reach the log ahead of rows queued
// before it.
//
// Thread safety: push() and drain() from any number of threads; close() not
// concurrently with push() on other threads (stop_queuing() may be: rows pushed
// after it are written directly).

#include <gpumem/detail/log_clock.hpp>
#include <gpumem/log_row.hpp>

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace gpumem {

class csv_log_writer;

class row_journal {
 public:
  /// Records in the ring (64 bytes each: 4 MiB).
  static constexpr std::uint64_t ring_slots = std::uint64_t{1} << 16;

  /// Creates (or empties) "<log.path()>.journal" and starts the helper thread.
  /// Throws logic_error naming the file and the reason when it cannot be made.
  /// `log` must outlive the journal (it owns it).
  explicit row_journal(csv_log_writer& log);
  ~row_journal();  ///< close()
  row_journal(row_journal const&) = delete;
  row_journal& operator=(row_journal const&) = delete;

  /// Queues `row`; false when it was not (see the file comment): write it then.
  /// row.entry and row.result must be strings that never change (literals);
  /// row.utc_offset_s is not read (the formatter takes the offset at the row's time).
  [[nodiscard]] bool push(log_row const& row) noexcept;
  /// push() for a row that started at `start_ticks` and ended at `end_ticks`
  /// (detail::log_ticks(); 0: its duration was not measured); row.time_ns and
  /// row.duration_ns are not read. False also for an event of 2^32 - 1 ticks or
  /// longer.
  [[nodiscard]] bool push(log_row const& row, std::uint64_t start_ticks, std::uint64_t end_ticks) noexcept;

  /// Formats every row queued so far into the log.
  void drain() noexcept;
  /// Queues nothing more, formats everything queued and tells the helper to end
  /// (exit: it is not waited for). The journal file stays until close().
  void stop_queuing() noexcept;
  /// In a forked child: queues nothing (the ring and the helper are the parent's).
  void forked() noexcept;
  /// stop_queuing(), then waits for the helper and removes the journal file.
  /// Idempotent.
  void close() noexcept;

  /// Test seam: journals made while this is on start no helper thread, so rows
  /// stay queued until a full ring, drain(), close() or exit formats them.
  static void hold_rows_for_testing(bool on) noexcept;

  /// Records formatted into the log (or given up) so far.
  [[nodiscard]] std::uint64_t rows_formatted() const noexcept { return tail_.load(std::memory_order_acquire); }

  struct file_header;  // the journal file's first bytes (implementation detail)
  struct record;       // one queued row (implementation detail)

 private:
  void helper_loop() noexcept;
  void wake_helper() noexcept;
  bool push_record(log_row const& row, std::int64_t time, std::uint32_t duration, std::uint8_t flags) noexcept;
  /// push_record() with the ring full: formats the oldest records until slot `i` is
  /// free; false if the record was given up meanwhile (the caller writes the row).
  [[gnu::cold, gnu::noinline]] bool wait_for_slot(std::uint64_t i) noexcept;
  /// The formatter's tick anchor, copied to the header if it changed (the
  /// caller holds drain_mutex_, or is the constructor).
  detail::tick_anchor publish_anchor() noexcept;
  /// Formats a batch of published records from the ring's tail into the log;
  /// the caller holds drain_mutex_. False: nothing was ready.
  bool drain_batch_locked() noexcept;
  void drain_until(std::uint64_t until) noexcept;
  /// The record's name index for `name` (0 for nullptr); 255: the table is full.
  std::uint8_t name_index(const char* name) noexcept;
  /// name_index() past the first few names: looks further, adds `name` if new.
  [[gnu::noinline]] std::uint8_t add_name(const char* name) noexcept;

  csv_log_writer* log_;
  std::string path_;
  int fd_{-1};
  file_header* header_{};
  record* ring_{};
  std::size_t mapped_bytes_{};
  alignas(64) std::atomic<std::uint64_t> head_{0};  ///< records reserved
  alignas(64) std::atomic<std::uint64_t> tail_{0};  ///< records formatted or given up (moved by the drainer)
  /// Nonzero: queue nothing more (stopped, closed, a forked child). Read by every push.
  std::atomic<std::uint32_t> closed_{0};
  detail::tick_anchor anchor_{};                             ///< the drainer's (under drain_mutex_)
  pthread_mutex_t drain_mutex_ = PTHREAD_MUTEX_INITIALIZER;  ///< one formatter at a time
  pthread_mutex_t names_mutex_ = PTHREAD_MUTEX_INITIALIZER;  ///< adding to the name table
  /// Name pointers of this process by index (the file holds their text).
  std::atomic<const char*> names_[256]{};
  std::atomic<bool> helper_stop_{false};
  alignas(4) std::atomic<std::uint32_t> helper_wake_{0};  ///< futex word
  pthread_t helper_thread_{};
  bool helper_started_{false};
};

/// What recover_journal() did.
struct journal_recovery {
  bool found = false;         ///< a journal was beside the log
  bool writer_alive = false;  ///< its writer still holds the log: nothing done
  std::uint64_t rows = 0;     ///< rows appended to the log
  std::uint64_t lost = 0;     ///< records their writer died while storing, or cut off (counted in the marker)
  /// The journal was cut short: only the records it still held whole were
  /// appended; a marker line says that the others are lost.
  bool truncated = false;
  std::string error;  ///< why it could not be recovered ("" when it was, or nothing to do)
};

/// When "<log_path>.journal" is beside the log and no process writes the log any
/// more (its lock is free): appends the rows the journal still held to
/// the log (after the last complete row; a marker line follows when records were
/// lost or the journal was cut short), and removes the journal. The journal is
/// read, not mapped. The records held are those stored after the last one
/// formatted (a record reserved but never stored is counted lost only if a later
/// one was stored). Never throws.
journal_recovery recover_journal(std::string const& log_path) noexcept;

}  // namespace gpumem
