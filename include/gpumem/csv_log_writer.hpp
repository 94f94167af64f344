#pragma once
// csv_log_writer: the allocation log that survives the process and never harms it.
//
// Format (RMM's columns first, in RMM's formats, then gpumem's):
//   Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result,Reserved,Stack
//   140245,14:02:07.123456,allocate,0x7f3a40000000,1048576,0x1,0,cudaMalloc,1763733727123456789,412,CUDA_SUCCESS,2097152,9c1e07a2f3b4d5e6
// Thread: OS thread id. Time: local HH:MM:SS.ffffff. Action: allocate |
// allocate failure | free. Pointer: %p style, "(nil)" for null (for the shim's
// cuMemCreate / cuMemRelease rows: the allocation handle). Size: requested
// bytes. Stream: "0" for null, else 0x-hex. Device: ordinal, -1 unknown. Entry:
// the intercepted entry point, or allocate/free for library calls. TimeNs:
// CLOCK_REALTIME ns (absolute: comparable across processes and ranks).
// DurationNs: time the call took; empty when it was not measured (the shim
// measures a call only if it reached the driver or took gpumem's slow path:
// detail/slow_work.hpp; a call served from the free lists takes well under a
// microsecond).
// Result: CUDA_SUCCESS or the error name.
// Reserved: bytes the writer's resource chain held from the device after the
// event, decimal; empty when unknown (logging_resource_adaptor leaves it empty).
// Stack: the id (hex, no 0x) of the calling stack in the stack table written
// beside the log ("<log>.stacks", see src/shim/stack_table.hpp); empty when no
// stack was recorded for the event.
//
// Metadata lines start with '#'; readers skip them as data. The writer adds the
// incompleteness marker when rows were lost (and, after a truncation, possibly
// a filler line: '#' and spaces):
//   #gpumem incomplete,dropped_rows=<N>,reason=<text>
// (one line, no other commas). It is appended as soon as rows start being
// dropped (if the room kept for it allows, so a crash afterwards still leaves
// it), after the log was truncated under the writer, and at close/exit. A later
// marker supersedes an earlier one: the last counts. dropped_rows is the number
// of rows the writer itself could not store up to that point; rows that someone
// else's truncation erased are not counted (the reason names the truncation). A
// log with a marker is incomplete: leak and peak figures from it are not to be
// trusted. An orderly close (or exit) of a log that lost nothing adds no line.
//
// Durability: the file is mapped MAP_SHARED, so a row is in the page cache, and
// will reach the file, as soon as write() returns, even if the process is then
// killed (SIGKILL, SIGSEGV, abort). A row's space is reserved by one compare-and-
// swap on the write offset, only inside the part of the file already allocated
// (fallocate), then the row is memcpy'd in. A helper thread ("gpumem-log", all
// signals blocked; it never stores into the mapping) keeps the file allocated
// and its pages populated a few MiB ahead of the write offset, so writers
// normally neither grow the file nor take page faults. Without the helper
// (kernel before 5.14, no thread could be started, a forked child) writers do
// both themselves.
//
// READERS MUST IGNORE NUL BYTES. After a crash the file ends in NULs past the
// last row (space allocated ahead), and a row whose writer died mid-copy leaves
// a NUL hole or an incomplete line; skip lines that contain NUL or do not have
// 13 fields. An orderly close() (or exit, via an atexit hook) truncates the file
// to the bytes written: no NULs remain (except where another program's
// truncation erased rows during a growth of the file, see below).
//
// Hostile conditions (the log never kills or stops the program):
// - Another process writes the same path: the first writer holds an exclusive
//   flock on the file; a writer that finds it taken writes "<path>.<pid>"
//   instead and says so through the notifier (one line naming both files).
//   Two writers in one process on one path behave the same way. A forked child
//   shares its parent's writer (one file, rows never interleaved mid-row) and
//   is not a conflict. A writer that opens a path nobody holds any more empties
//   it, as a rerun does (and removes a "<path>.journal" its last writer left,
//   row_journal.hpp). Files on a file system without flock are not protected.
// - Disk full, quota, RLIMIT_FSIZE: the file cannot be allocated further. Rows
//   that do not fit are dropped and counted (never a NUL gap: a row's space is
//   reserved only where the file is allocated); the notifier says so once, the
//   marker follows in room kept free for it at the end of the allocated file
//   (two markers' worth), and close/exit reports the count. Growth is retried
//   at most every 100 ms, so a full disk costs a dropped row no system call.
//   The file never grows past RLIMIT_FSIZE (which would raise SIGXFSZ).
// - The file is truncated under the writer (": > log", logrotate's
//   copytruncate): pages of a MAP_SHARED mapping past the end of the file raise
//   SIGBUS on access. A SIGBUS handler, installed with the first writer, acts
//   only on faults inside a log's own mapping (or a mapping lent to it with
//   detail::guard_mapping: row_journal's ring, whose owner is told and does its
//   own repair): it maps an anonymous page over
//   the faulting one (the store lands there) and wakes the helper; every other
//   SIGBUS goes to the handler that was installed before it (or the default
//   action, so a real fault still kills with a core dump). The handler uses only
//   atomics, mmap, sigaction, raise and a futex wake, and restores errno. The
//   writer that faulted (or the helper, which also looks every 200 ms) then
//   repairs the log: the file is allocated again, its header rewritten if it
//   was cut, and the log goes on right after what is left of the file, behind
//   a marker line (in the next page if the file now ends inside one: the gap
//   becomes a '#' filler line; a row cut in the middle is ended there, and
//   readers skip it as malformed). Every repair maps all of the log's windows
//   from the file again, which undoes the anonymous pages. Rows written before
//   the truncation are gone, as the truncating program wanted.
//   Rows in flight: the handler counts each anonymous page before it maps it
//   and again after; a writer reads the count before and after its copy, so a
//   copy that may have gone to an anonymous page (its own fault or another
//   thread's, whenever the page was mapped relative to a repair) is never taken
//   for stored. Such a row is copied again once its writer has made sure the
//   file is whole and no window holds an anonymous page; if the log restarted
//   since the row was reserved, its place belongs to later rows and it is lost
//   and counted instead. Writers wait (yielding, at most 20 ms) during the few
//   atomic operations a repair pauses reservations for, and for another
//   thread's handler that is mapping its page; past that the row is counted.
//   A truncation that lands while the file is being grown, between the check
//   that it is whole and the allocation, is undone by the growth: the file is as
//   long as before, with zeros where the erased rows were, and the rows go on
//   where they are (none stored since is lost: a store that faulted before the
//   growth is stored again). When the file was cut inside its header (": > log"
//   and copytruncate cut it to nothing), the check of the header that follows
//   every growth finds it: the header is written again, a marker line follows
//   the rows, and the file keeps NUL bytes where the erased rows were (the
//   disk blocks are freed).
//   What is not covered: rows stored between the truncation and its discovery
//   into the page that then holds the end of the file are lost uncounted (at
//   most a page of rows, and only when the file was cut to a size that is not
//   a page multiple); a cut past the header that a growth undid is not noticed
//   (NUL bytes where the erased rows were, no marker), and a row being copied
//   at the moment of such a cut, and still being copied after the growth, keeps
//   only its end (a malformed line, not counted); and a writer held up between
//   reserving its row and copying it for the whole repair, and until later rows
//   reach the old place of its row, overwrites some of them (its own row is
//   counted, the damaged ones become malformed lines). A program that installs
//   its own SIGBUS handler after the first writer opened replaces this guard
//   (its handler then sees the log's faults), unless it runs under the
//   preloaded shim, whose sigaction, signal and System V hooks (sigset,
//   sigignore) keep the program's action behind the guard
//   (detail::sigbus_sigaction).
//   A thread that blocks SIGBUS would be killed by the kernel at a fault in a
//   log's mapping (a blocked fault is never left pending): a store lets SIGBUS
//   through for its duration (detail/sigbus_mask.hpp).
// - The file is renamed or deleted: rows keep going to the open file.
//
// fork: the write offset, the growth lock and the counters live in a shared
// anonymous page, so a forked child appends to the same file without
// overwriting its parent's rows. Only the opening process writes the final
// marker and truncates at close/exit.
//
// Thread safety: write() and flush() from any number of threads. close() (and the
// destructor) must not race with write() on other threads; write() after close()
// stores nothing.

#include <gpumem/detail/live_list.hpp>

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpumem {

enum class log_action : std::uint8_t { allocate, allocate_failure, free };

/// One event, as format_row() writes it.
struct log_row {
  /// duration_ns of a call whose duration was not measured.
  static constexpr std::uint64_t unmeasured = ~std::uint64_t{0};

  std::uint64_t thread_id{};
  std::int64_t time_ns{};       ///< CLOCK_REALTIME
  std::int32_t utc_offset_s{};  ///< local time = time_ns + offset (Time column)
  log_action action{log_action::allocate};
  void const* pointer{};
  std::size_t size{};
  std::uintptr_t stream{};
  int device{-1};
  /// nullptr: "allocate"/"free" from the action. A string that never changes (a
  /// literal): format_row remembers its sanitized text by address.
  const char* entry{};
  std::uint64_t duration_ns{};  ///< log_row::unmeasured: empty DurationNs
  const char* result{};         ///< nullptr: "CUDA_SUCCESS"
  std::int64_t reserved{-1};    ///< Reserved column; negative: unknown (empty)
  std::uint64_t stack{};        ///< Stack column; 0: none (empty)
};

inline constexpr std::string_view csv_log_header =
    "Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result,Reserved,Stack\n";

/// Fields per row (and in the header).
inline constexpr std::size_t csv_log_columns = 13;

/// Longest row format_row() can produce (entry and result are cut to 64 chars).
inline constexpr std::size_t max_row_bytes = 384;

/// Start of the incompleteness marker line (see the file comment).
inline constexpr std::string_view csv_log_incomplete_prefix = "#gpumem incomplete,";

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

class csv_log_writer {
 public:
  /// Receives one line of news about the log (no trailing newline): the path
  /// was taken, rows start being dropped, the file was truncated, rows were
  /// dropped (at close). Called from the writing thread, the helper thread or
  /// at exit; never from a signal handler.
  using notify_fn = void (*)(std::string_view line) noexcept;
  /// The default notifier: the line at warn level through gpumem's diagnostics
  /// (diagnostics.hpp: "gpumem: <line>\n" on stderr, in one write()).
  static void notify_stderr(std::string_view line) noexcept;

  /// Creates (or empties) `path` and writes the header; if another writer
  /// holds `path`, uses "<path>.<pid>" (see the file comment). Throws
  /// logic_error naming the path and the reason when it cannot be opened, is
  /// not a regular file, or cannot hold the header.
  explicit csv_log_writer(std::string path, notify_fn notifier = &notify_stderr);
  ~csv_log_writer();
  csv_log_writer(csv_log_writer const&) = delete;
  csv_log_writer& operator=(csv_log_writer const&) = delete;
  csv_log_writer(csv_log_writer&&) = delete;
  csv_log_writer& operator=(csv_log_writer&&) = delete;

  /// Appends one row. Never throws; a row that cannot be stored is counted in
  /// dropped_rows().
  void write(log_row const& row) noexcept;
  /// Appends pre-formatted bytes (whole lines).
  void append(char const* data, std::size_t len) noexcept;
  /// Called by append_batch() once the bytes' place in the file is reserved,
  /// before they are written there (row_journal notes where its batch goes).
  using reserved_fn = void (*)(void* context, std::uint64_t offset) noexcept;
  /// Appends many rows at once (tens of KiB) with pwrite instead of through the
  /// mapping: whole new pages are then filled without being zeroed first, and the
  /// calling thread never faults (it may block signals). A truncation of the file
  /// since the last batch is repaired first (one fstat per batch), and one during
  /// the write is found by its cut header after it (one pread per batch). Calls
  /// `on_reserved(context, offset)` first. False when the bytes (`rows` rows)
  /// were not stored: the log is closed, or they are counted as dropped.
  bool append_batch(char const* data, std::size_t len, std::uint64_t rows, reserved_fn on_reserved,
                    void* context) noexcept;
  /// Whether the helper thread keeps pages ahead of the write offset populated
  /// for writers that store through the mapping (on by default; a log filled by
  /// append_batch() does not need it).
  void populate_ahead(bool on) noexcept;
  /// Counts `rows` lost before they reached the writer (row_journal's records
  /// whose writer never finished them): the marker and close() report them.
  void count_lost(std::uint64_t rows) noexcept;
  /// row_journal's file `journal` was found truncated (to `size` bytes) and given
  /// up; `lost` of its rows (counted already with count_lost()) were only there.
  /// The marker's reason names it (a marker follows now if any row was lost), and
  /// the notifier says so, once per call.
  void journal_truncated(std::string const& journal, std::uint64_t size, std::uint64_t lost) noexcept;

  /// Schedules write-back of the written pages (msync MS_ASYNC). Not needed for
  /// crash safety, only against a machine crash.
  void flush() noexcept;
  /// Writes the marker if rows were lost, truncates the file to the bytes
  /// written and unmaps it. Idempotent.
  void close() noexcept;

  /// The file written: requested_path(), or "<requested_path>.<pid>".
  [[nodiscard]] std::string const& path() const noexcept { return path_; }
  /// The path the writer was asked for.
  [[nodiscard]] std::string const& requested_path() const noexcept { return requested_path_; }
  /// Bytes stored so far, header and markers included (== file size after close()).
  [[nodiscard]] std::uint64_t bytes_written() const noexcept;
  /// Rows that could not be stored (disk full, a page lost to a truncation).
  [[nodiscard]] std::uint64_t dropped_rows() const noexcept;
  /// Times the file was found truncated under the writer.
  [[nodiscard]] std::uint32_t truncations() const noexcept;

  /// Longest incompleteness marker line, '\n' included.
  static constexpr std::size_t marker_bytes = 192;

  /// Test seam: points of a truncation repair (and of a growth) at which a test
  /// holds a thread, or truncates the file, to force an interleaving. The hook runs inside the SIGBUS handler for the
  /// first two, so it must be async-signal-safe. Never set outside tests.
  enum class repair_point : std::uint8_t {
    fault_caught,     ///< SIGBUS handler, a fault in a log's mapping: before it maps an anonymous page there
    fault_overlaid,   ///< SIGBUS handler: after it did, before it returns
    truncation_seen,  ///< a repair found the file shorter than allocated (growth lock held)
    resumed,          ///< a repair let reservations go on again; the file is not whole yet
    remapped,         ///< a repair mapped the log's windows from the file again (growth lock held)
    growing,          ///< a growth found the file whole and is about to allocate more (growth lock held)
    noting,           ///< a repair is about to write its note (growth lock released)
  };
  using repair_hook_fn = void (*)(repair_point) noexcept;
  static void set_repair_hook_for_testing(repair_hook_fn hook) noexcept;

  struct shared_state;  // the page shared across fork (implementation detail)

 private:
  friend struct log_fault_guard;  // the SIGBUS handler (csv_log_writer.cpp)
  friend class detail::live_list<csv_log_writer>;

  void open_file();
  /// Makes [0, need) allocated in the file (and mapped here); false when the
  /// file cannot grow (disk full; then it backs off for a while).
  /// `ahead`: the helper's guess; its failure neither backs off nor counts.
  bool make_room(std::uint64_t need, bool ahead) noexcept;
  /// Reserves `len` bytes at the write offset (growing the file if needed); its
  /// offset, and the epoch then, or nothing when they cannot be stored (counted,
  /// unless the log is closed).
  std::optional<std::uint64_t> reserve(std::size_t len, std::uint32_t& epoch) noexcept;
  bool grow_locked(std::uint64_t need, bool ahead) noexcept;
  bool map_windows_locked(std::uint64_t end) noexcept;
  /// Waits while a repair pauses reservations; false if that takes too long.
  bool wait_unpaused(std::uint64_t& off) noexcept;
  /// Copies a reserved row in; `epoch` is shared_state::epoch at reservation.
  void store(std::uint64_t offset, char const* data, std::size_t len, std::uint32_t epoch) noexcept;
  void copy_out(std::uint64_t offset, char const* data, std::size_t len) noexcept;
  /// store()'s slow path: the copy may have gone to an anonymous page, or the log
  /// restarted since the row was reserved. Repairs, then stores the row again or
  /// counts it.
  void store_again(std::uint64_t offset, char const* data, std::size_t len, std::uint32_t epoch) noexcept;
  /// Counts a row not stored; the first one the file had no room for is announced.
  void count_dropped(bool lost_page) noexcept;
  /// The marker line for the counters now; its length (0 if it does not fit).
  std::size_t format_marker(char (&line)[marker_bytes]) const noexcept;
  /// Reserves and writes the marker line; `keep` bytes of the allocated file
  /// must stay free after it; `close` also closes the log in the same step.
  /// `through_file`: written with pwrite, not through the mapping (the helper
  /// thread never stores into the mapping).
  bool append_marker(std::uint64_t keep, bool close, bool through_file = false) noexcept;
  /// After a fault in the mapping or when the file is found shorter than
  /// allocated: re-allocates, restarts after what is left, and maps every window
  /// from the file again (which undoes the SIGBUS handler's anonymous pages).
  void recover() noexcept;
  bool recover_locked(std::uint64_t& kept) noexcept;
  /// Under the growth lock: the header at the start of the file is not what was
  /// written (the file was cut inside it).
  [[nodiscard]] bool header_cut() const noexcept;
  /// Under the growth lock: when the header was cut (by a truncation that a later
  /// growth or pwrite undid), writes it again and a marker line; true if it did.
  bool rewrite_cut_header_locked() noexcept;
  /// Says that the log was found cut inside its header (after the lock is released).
  void notify_header_cut() noexcept;
  /// Under the growth lock: a repair's note will follow once the lock is released.
  void note_due() noexcept;
  /// Writes a note that note_due() announced.
  void notify_due(std::string const& line) noexcept;
  /// Waits (a second at most: stderr may be a pipe nobody reads) until every
  /// announced note is written.
  void wait_for_notes() noexcept;
  void finish(bool unmap) noexcept;
  static void finish_all_at_exit() noexcept;  // atexit hook over the live writers
  void start_helper() noexcept;
  void stop_helper() noexcept;
  void helper_loop() noexcept;
  /// Populates file bytes [from, to) for writing; false on a fault (truncation).
  bool populate(std::uint64_t from, std::uint64_t to) noexcept;
  void wake_helper() noexcept;
  void notify(std::string const& line) const noexcept;

  static constexpr std::size_t window_bytes = std::size_t{256} << 20;      // 256 MiB of address space
  static constexpr std::size_t max_windows = 4096;                         // 1 TiB of log
  static constexpr std::uint64_t prefault_ahead = std::uint64_t{4} << 20;  // populated past the write offset
  static constexpr unsigned prefault_grain_shift = 17;                     // writers wake the helper every 128 KiB

  std::string requested_path_;
  std::string path_;
  notify_fn notify_;
  int fd_{-1};
  int owner_pid_{};
  shared_state* shared_{};
  /// Window k maps file bytes [k*W, (k+1)*W) in this process; set under the
  /// growth lock, read lock-free by writers.
  std::atomic<char*> windows_[max_windows]{};
  /// Pages of this process's mapping the SIGBUS handler replaced by anonymous ones.
  /// Low half: overlays begun (counted before the page is mapped); high half: the
  /// overlays undone (a repair's remap undid every overlay made up to that count).
  /// Equal halves: no page is anonymous. A writer reads it before and after its
  /// copy: a change, or unequal halves, means the copy may have gone to such a page.
  std::atomic<std::uint64_t> overlays_{0};
  /// Overlays whose anonymous page is mapped (counted after the mmap).
  std::atomic<std::uint32_t> overlays_made_{0};
  /// Times a repair mapped the windows from the file again (the helper then
  /// populates them afresh).
  std::atomic<std::uint32_t> remaps_{0};
  /// Repairs' notes announced under the growth lock and not written yet. The
  /// thread that repaired (often the helper) writes its note after releasing the
  /// lock; finish() waits for it, or a program that exits right then loses it.
  /// A futex word: the last note written wakes finish().
  alignas(4) std::atomic<std::uint32_t> notes_due_{0};
  std::uint64_t final_bytes_{};  ///< bytes_written() after close()
  std::uint64_t final_dropped_{};
  std::uint32_t final_truncations_{};
  csv_log_writer* next_live_{};  ///< on the live writers' list, for the atexit hook
  csv_log_writer* prev_live_{};
  pthread_t helper_thread_{};
  bool helper_started_{false};            ///< by this process (owner_pid_); a forked child has no helper
  std::atomic<bool> populate_on_{false};  ///< the helper populates pages: writers wake it
  std::atomic<bool> helper_stop_{false};
  alignas(4) std::atomic<std::uint32_t> helper_wake_{0};  ///< futex word: bumped to wake the helper
};

}  // namespace gpumem
