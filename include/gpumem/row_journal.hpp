#pragma once
// row_journal: log rows queued for a helper thread to format, kept in a file so
// that a crash loses none of them.
//
// csv_log_writer formats each row on the thread that logs it: about 100 bytes
// of text and a page of the log's file touched every ~40 rows. A row_journal
// takes that off the calling thread. A row becomes one 64-byte binary record in
// a ring of records mapped from "<log>.journal" (MAP_SHARED: once stored, the
// record is in the page cache and outlives the process, SIGKILL included). A
// helper thread ("gpumem-logfmt") formats the records, in ring order, into the
// CSV log in batches of up to 32 KiB (csv_log_writer::append_batch, with pwrite:
// whole pages of the log are filled without first being zeroed). The ring's 4 MiB
// are allocated and mapped writable up front and reused lap after lap, so the
// calling thread makes no system call and takes no page fault (except, rarely, a
// minor one after the kernel wrote a ring page back to disk).
//
// Cost on the calling thread: one fetch_add on the ring's head, a 64-byte store
// (the line eight records ahead is fetched for writing meanwhile: the formatter
// read it a lap ago, and a store that missed would hold up the next locked
// instruction), two relaxed loads of the journal's state, and, once per
// ring_slots/8 rows, a futex wake of the helper. A row pushed with
// its start and end counter values (as the shim does) is not even converted to
// the wall clock there: the formatter converts it, with an anchor it also keeps
// in the journal's header for recovery.
//
// Ordering: rows reach the CSV in the order their records were reserved, the
// order rows would have had without the journal.
//
// A full ring (the helper fell behind): the calling thread formats the oldest
// records itself (one thread at a time) until its record has room. A record
// reserved but not stored for 1 s (its thread stopped between the two) is given
// up, counted as lost in the log's marker; should its thread store it later,
// after the ring came round, the row may be lost or show another row's fields.
//
// After a crash the CSV lacks the rows still in the ring (at most 64 ms of them
// while the helper keeps up: it looks at least every 64 ms); so does a process
// that ends with _exit() or quick_exit(), which skip the exit hook that formats
// what is left. recover_journal() appends them: gpumem-report and gpumem-replay
// call it on the logs they read, and say so. A record whose
// writer died while storing it is counted in the CSV's incompleteness marker.
// Records carry the entry-point and result names as indices into a name table
// in the journal's header, so recovery needs nothing from the dead process.
//
// The journal truncated by another program (": > log.journal", copytruncate on
// a glob): the ring's pages past the new end of the file are gone, and touching
// them raises SIGBUS. So the ring's live state (head, tail, the tick anchor, the
// names) is kept in process memory, never read back from the file: the file's
// header is only a copy for recovery, and a cut cannot confuse the ring. The
// log's SIGBUS guard covers the mapping (detail::guard_mapping): a fault there
// maps a zero page over the lost one, so the access goes on, and marks the
// journal broken. A broken journal queues nothing more (rows are written
// directly, as without it), is removed (recovery must not trust it), and its
// remaining records are formatted, except those that lay past the cut: their
// stores may have been cut in half, so they are counted lost, as are records
// whose writer stored them before the cut (zero now). Found by the fault, or by
// the formatter, which checks the file's size (fstat) after each batch it formats
// and before waiting for a record not stored yet: a cut inside a page zeroes its
// end without a fault. A writer that sees the journal broken before it publishes
// its record marks the record void and writes the row directly. The cut is said
// once (the log's notifier: stderr in the shim) when the records queued before it
// are settled; how many were lost is counted in the log's marker. close() and
// exit look at the size once more, so a cut with nothing queued behind it is
// said too. Waits for records not stored yet share one
// deadline (100 ms after the cut was found), so the formatter, exit, or a caller
// with a full ring never waits longer in all; a writer stalled longer than that
// between reserving and storing has its row counted lost, even if it then writes
// it directly; so may one whose thread faulted on a page at the same moment as
// another (the second zero page replaces the first, and the record's void mark
// with it).
// What is not covered: a cut undone (the file extended again) before the journal
// looked goes unnoticed, or is taken for a shallower one: records it zeroed are
// then waited for and counted lost, and the one it cut in half may be formatted
// with zeroed fields. Once the journal is given up, the rows queued before the
// cut that are not formatted yet are no longer safe from a crash.
// Threads that block SIGBUS: the helper unblocks it; a program's thread that
// blocks it lets it through while it stores a record or formats (a full ring,
// exit), so a fault there reaches the guard (detail/sigbus_mask.hpp).
//
// Not queued (push() answers false and the caller writes the row directly): in
// a forked child (the ring is the parent's), after close() or exit, once the
// journal was found truncated, rows whose
// fields do not fit a record (a duration of 2^32 - 1 ns or more, or as many counter ticks, about
// 1.4 s at 3 GHz, for a row pushed in ticks; a thread id of 2^32 - 1 or more; a device past 127, more
// than 255 distinct names or one of 64 characters or more). Such a row may reach
// the log ahead of rows queued before it.
//
// Thread safety: push() from any number of threads; close() not concurrently
// with push() on other threads (exit is handled: rows pushed after the exit
// hook drained the ring are written directly).

#include <gpumem/csv_log_writer.hpp>
#include <gpumem/detail/live_list.hpp>
#include <gpumem/detail/log_clock.hpp>

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace gpumem {

class row_journal {
 public:
  /// Records in the ring (64 bytes each: 4 MiB).
  static constexpr std::uint64_t ring_slots = std::uint64_t{1} << 16;

  /// Creates (or empties) "<log.path()>.journal" and starts the helper thread
  /// (`with_helper` false, for tests: only callers that find the ring full, and
  /// close(), format rows). Throws logic_error naming the file and the reason
  /// when it cannot be made. `log` must outlive the journal.
  explicit row_journal(csv_log_writer& log, bool with_helper = true);
  ~row_journal();  ///< close()
  row_journal(row_journal const&) = delete;
  row_journal& operator=(row_journal const&) = delete;
  row_journal(row_journal&&) = delete;
  row_journal& operator=(row_journal&&) = delete;

  /// Queues `row`; false when it was not (see the file comment): write it then.
  /// row.entry and row.result must be strings that never change (literals);
  /// row.utc_offset_s is not read (the formatter takes the offset at the row's time).
  [[nodiscard]] bool push(log_row const& row) noexcept;
  /// push() for a row that started at `start_ticks` and ended at `end_ticks`
  /// (detail::log_ticks()); row.time_ns and row.duration_ns are not read. The
  /// conversion to the wall clock is left to the formatter (one anchor per
  /// batch, kept in the journal for recovery): the calling thread only stores
  /// the two counter values. False also for an event of 2^32 - 1 ticks or longer.
  [[nodiscard]] bool push(log_row const& row, std::uint64_t start_ticks, std::uint64_t end_ticks) noexcept;
  /// The same for a row whose duration was not measured (log_row::unmeasured).
  [[nodiscard]] bool push(log_row const& row, std::uint64_t start_ticks) noexcept;

  /// What a record keeps of a row besides its times: log_row's other fields, for
  /// a caller that has no log_row yet. An aggregate with no default values, so a
  /// caller that names every member stores each once (a log_row is zeroed first).
  struct fields {
    std::uint64_t thread_id;
    void const* pointer;
    std::size_t size;
    std::uintptr_t stream;
    std::int64_t reserved;
    std::uint64_t stack;
    const char* entry;   ///< as log_row::entry
    const char* result;  ///< as log_row::result
    int device;
    log_action action;
  };
  /// The fields of `row` (its times left out).
  [[nodiscard]] static fields fields_of(log_row const& row) noexcept;
  /// push(row, start_ticks, end_ticks) for a row given as its fields.
  [[nodiscard]] bool push(fields const& row, std::uint64_t start_ticks, std::uint64_t end_ticks) noexcept;
  /// push(row, start_ticks) for a row given as its fields.
  [[nodiscard]] bool push(fields const& row, std::uint64_t start_ticks) noexcept;

  /// Formats every queued row into the log now, then queues no more, stops the
  /// helper and removes the journal file. Idempotent.
  void close() noexcept;

  /// The journal file.
  [[nodiscard]] std::string const& path() const noexcept { return path_; }
  /// Records formatted into the log (or given up) so far, by the helper or by full-ring callers.
  [[nodiscard]] std::uint64_t rows_formatted() const noexcept;

  struct file_header;  // the journal file's first bytes (implementation detail)
  struct record;       // one queued row (implementation detail)

 private:
  friend class detail::live_list<row_journal>;
  void start_helper() noexcept;
  void helper_loop() noexcept;
  void wake_helper() noexcept;
  bool push_record(fields const& row, std::int64_t time, std::uint32_t duration, std::uint8_t flags) noexcept;
  /// push_record() with the ring full: formats the oldest records until slot `i` is
  /// free; false if the record was given up meanwhile (the caller writes the row).
  [[gnu::cold, gnu::noinline]] bool wait_for_slot(std::uint64_t i) noexcept;
  /// The formatter's tick anchor, copied to the header if it changed (the
  /// caller holds drain_mutex_, or is the constructor).
  detail::tick_anchor publish_anchor() noexcept;
  /// The file is shorter than mapped: `size` bounds its end. Callable from the
  /// SIGBUS handler (atomics and a futex wake only).
  void note_cut(std::uint64_t size) noexcept;
  /// Whether the file is now shorter than mapped (or than the cut known); notes it.
  bool check_size() noexcept;
  /// A broken journal: settles it (once: removes the file, starts the wait
  /// deadline) and, once the records queued before the cut are settled, says so;
  /// the caller holds drain_mutex_.
  void settle_cut_locked() noexcept;
  /// At close and exit: looks for a cut (one fstat), and if the journal is broken
  /// settles it and says so, its queued records settled; whether it is broken.
  bool settle_if_cut() noexcept;
  /// close() and exit, by the owner: queues nothing more, formats everything
  /// queued, then settle_if_cut(); whether the journal was given up (its file gone).
  bool stop_queuing() noexcept;
  /// Formats a batch of published records from the ring's tail into the log;
  /// the caller holds drain_mutex_. False: nothing was ready.
  bool drain_batch_locked() noexcept;
  /// Formats everything queued up to `until` (all of it at close and exit).
  void drain_until(std::uint64_t until) noexcept;
  /// The record's name index for `name` (0 for nullptr); 255: the table is full.
  std::uint8_t name_index(const char* name) noexcept;
  /// name_index() past the first few names: looks further, adds `name` if new.
  [[gnu::noinline]] std::uint8_t add_name(const char* name) noexcept;
  static void close_all_at_exit() noexcept;

  csv_log_writer* log_;
  std::string path_;
  int fd_{-1};
  int owner_pid_{};
  file_header* header_{};
  record* ring_{};
  std::size_t mapped_bytes_{};
  alignas(64) std::atomic<std::uint64_t> head_{0};  ///< records reserved
  alignas(64) std::atomic<std::uint64_t> tail_{0};  ///< records formatted or given up (moved by the drainer)
  /// closed_bit: no more queuing (close, exit, fork, no helper); broken_bit: the
  /// file was truncated. Read (relaxed) by every push.
  std::atomic<std::uint32_t> state_{0};
  /// File offset past which the ring may be lost (a cut's size, or a faulting
  /// page); UINT64_MAX while no cut is known.
  std::atomic<std::uint64_t> cut_at_{UINT64_MAX};
  // The drainer's (under drain_mutex_):
  detail::tick_anchor anchor_{};  ///< the anchor rows are formatted with (the header has a copy)
  bool cut_settled_{false};       ///< the cut was acted on
  bool cut_reported_{false};      ///< and said
  std::uint64_t cut_head_{};      ///< records reserved when it was acted on
  std::int64_t cut_deadline_{};   ///< waits for unstored records end then (CLOCK_MONOTONIC_COARSE ns)
  std::uint64_t cut_lost_{};      ///< records given up since
  pthread_mutex_t drain_mutex_ = PTHREAD_MUTEX_INITIALIZER;  ///< one formatter at a time
  pthread_mutex_t names_mutex_ = PTHREAD_MUTEX_INITIALIZER;  ///< adding to the name table
  /// Name pointers of this process by index (the file holds their text).
  std::atomic<const char*> names_[256]{};
  std::atomic<bool> helper_stop_{false};
  alignas(4) std::atomic<std::uint32_t> helper_wake_{0};  ///< futex word
  pthread_t helper_thread_{};
  bool helper_started_{false};
  row_journal* next_live_{};  ///< on the live journals' list, for the exit hook and fork
  row_journal* prev_live_{};
};

/// What recover_journal() did.
struct journal_recovery {
  bool found = false;         ///< a journal was beside the log
  bool writer_alive = false;  ///< its writer still holds the log: nothing done
  std::uint64_t rows = 0;     ///< rows appended to the log
  std::uint64_t lost = 0;     ///< records their writer died while storing, or cut off (counted in the marker)
  /// The journal was cut short (by another program): only the records it still
  /// held whole were appended; a marker line says that the others are lost.
  bool truncated = false;
  std::string error;  ///< why it could not be recovered ("" when it was, or nothing to do)
};

/// When "<log_path>.journal" is beside the log and no process writes the log any
/// more (its lock is free; when the journal's process is gone, up to 5 s are
/// given for the lock to go with it): appends the rows the journal still held to the log
/// (after the last complete row; a marker line follows when records were lost or
/// the journal was cut short), ends the log there, and removes the journal. The
/// journal is read, not mapped: one cut meanwhile cannot raise SIGBUS. The
/// records held are those stored after the last one formatted (a record
/// reserved but never stored is counted lost only if a later one was stored).
/// Never throws.
journal_recovery recover_journal(std::string const& log_path) noexcept;

}  // namespace gpumem
