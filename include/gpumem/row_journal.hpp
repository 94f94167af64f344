#pragma once
// row_journal: the log's rows as 64-byte records in a ring mapped MAP_SHARED from
// "<log>.journal", so that a row is in the page cache, and outlives the process
// (SIGKILL included), when the call that logged it returns. A helper thread
// ("gpumem-logfmt") formats the records, in the order they were reserved, into
// the CSV; recover_journal() appends what a process that died (or ended with
// _exit, skipping the exit hook) left. The ring is allocated and made writable up
// front: the calling thread makes no system call and takes no page fault
// (docs/design/log.md has the design and its costs).
//
// A full ring: the calling thread formats the oldest records itself. A record
// reserved but not stored for 1 s (its thread stopped in between) is given up and
// counted in the log's marker. push() answers false, and the caller writes the
// row directly (it may then reach the log ahead of rows queued before it), in a
// forked child, after stop_queuing(), and for a row that does not fit a record:
// a duration of 2^32 - 1 ns (or ticks) or more, a thread id of 2^32 - 1 or more, a
// device past 127, a 256th distinct name or one of 64 characters or more.
//
// Another program truncating the journal makes its pages vanish under the
// mapping (SIGBUS at the next store, as for any mapping): out of scope, like
// writing into the program's memory. The CSV is the file to rotate.
//
// Thread safety: push() and drain() from any thread; stop_queuing() too; close()
// not concurrently with push() on other threads.

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

  /// Queues `row`; false: write it yourself. Its entry and result must be strings
  /// that never change (literals); utc_offset_s is not read.
  [[nodiscard]] bool push(log_row const& row) noexcept;
  /// push() for a row from `start_ticks` to `end_ticks` (detail::log_ticks(); 0: not
  /// measured), converted to the wall clock by the formatter; time_ns and
  /// duration_ns are not read.
  [[nodiscard]] bool push(log_row const& row, std::uint64_t start_ticks, std::uint64_t end_ticks) noexcept;

  /// Formats every row queued so far into the log.
  void drain() noexcept;
  /// Queues nothing more, formats what is queued, removes the journal file and
  /// tells the helper to end (at exit it is not waited for).
  void stop_queuing() noexcept;
  /// In a forked child: queues nothing (the ring and the helper are the parent's).
  void forked() noexcept;
  /// stop_queuing(), then waits for the helper and unmaps. Idempotent.
  void close() noexcept;

  /// Test seam: journals made while this is on start no helper thread, so rows
  /// stay queued until a full ring, drain(), close() or exit formats them.
  static void hold_rows_for_testing(bool on) noexcept;

  /// Records formatted into the log (or given up) so far.
  [[nodiscard]] std::uint64_t rows_formatted() const noexcept { return tail_.load(std::memory_order_acquire); }

  struct file_header;  // implementation details: the file's first bytes,
  struct record;       // one queued row

 private:
  void helper_loop() noexcept;
  void wake_helper() noexcept;
  bool push_record(log_row const& row, std::int64_t time, std::uint32_t duration, std::uint8_t flags) noexcept;
  /// The ring full: formats the oldest records until slot `i` is free; false if
  /// the record was given up meanwhile.
  [[gnu::cold, gnu::noinline]] bool wait_for_slot(std::uint64_t i) noexcept;
  /// The formatter's tick anchor, copied to the header if newer (drain_mutex_ held).
  detail::tick_anchor publish_anchor() noexcept;
  /// Formats a batch of published records from the ring's tail into the log;
  /// the caller holds drain_mutex_. False: nothing was ready.
  bool drain_batch_locked() noexcept;
  void drain_until(std::uint64_t until) noexcept;
  /// The record's index of `name` (0 for nullptr; 255: the table is full).
  std::uint8_t name_index(const char* name) noexcept;
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
  std::uint64_t lost = 0;     ///< records their writer died while storing (counted in the marker)
  std::string error;          ///< why it could not be recovered ("" when it was, or nothing to do)
};

/// When "<log_path>.journal" is beside the log and no process writes the log any
/// more (its lock is free): appends the rows the journal still held after the
/// log's last complete row, then a marker line if records were lost, and removes
/// the journal. Reads it, never maps it. Never throws.
journal_recovery recover_journal(std::string const& log_path) noexcept;

}  // namespace gpumem
