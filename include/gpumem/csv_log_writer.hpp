#pragma once
// csv_log_writer: the allocation log that survives the process.
//
// Format (RMM's columns first, in RMM's formats, then gpumem's):
//   Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result
//   140245,14:02:07.123456,allocate,0x7f3a40000000,1048576,0x1,0,cudaMalloc,1763733727123456789,412,CUDA_SUCCESS
// Thread: OS thread id. Time: local HH:MM:SS.ffffff. Action: allocate |
// allocate failure | free. Pointer: %p style, "(nil)" for null. Size: requested
// bytes. Stream: "0" for null, else 0x-hex. Device: ordinal, -1 unknown. Entry:
// the intercepted entry point, or allocate/free for library calls. TimeNs:
// CLOCK_REALTIME ns (absolute: comparable across processes and ranks).
// DurationNs: time the upstream call took. Result: CUDA_SUCCESS or the error name.
//
// Durability: the file is mapped MAP_SHARED, so a row is in the page cache — and
// will reach the file — as soon as write() returns, even if the process is then
// killed (SIGKILL, SIGSEGV, abort). Space is reserved with one atomic fetch_add
// on the write offset and the row memcpy'd in; only when the reserved space runs
// out does one writer extend the file (others wait just then).
//
// Page faults: the first store to each 4 KiB page of a shared file mapping is a
// page fault (~1-2 us, i.e. tens of ns per row). A helper thread ("gpumem-log",
// all signals blocked) keeps the file grown and its pages populated for writing
// (MADV_POPULATE_WRITE) a few MiB ahead of the write offset, woken by the writer
// whose row crosses a 128 KiB boundary, so writers normally neither fault nor
// grow the file. Without the helper (kernel before 5.14, no thread could be
// started, or in a forked child) writers fault the pages in themselves.
//
// READERS MUST IGNORE NUL BYTES. After a crash the file ends in NULs past the
// last row (space reserved ahead), and a row whose writer died mid-copy leaves a
// NUL hole or an incomplete line; skip lines that contain NUL or do not have 11
// fields. An orderly close() (or exit, via an atexit hook) truncates the file to
// the bytes written.
//
// fork: the write offset and the growth lock live in a shared anonymous page, so
// a forked child appends to the same file without overwriting its parent's rows.
// Only the opening process truncates at close/exit.
//
// Thread safety: write() and flush() from any number of threads. close() (and the
// destructor) must not race with write() on other threads; write() after close()
// drops the row.

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpumem {

enum class log_action : std::uint8_t { allocate, allocate_failure, free };

/// One event, as format_row() writes it.
struct log_row {
  std::uint64_t thread_id{};
  std::int64_t time_ns{};          ///< CLOCK_REALTIME
  std::int32_t utc_offset_s{};     ///< local time = time_ns + offset (Time column)
  log_action action{log_action::allocate};
  void const* pointer{};
  std::size_t size{};
  std::uintptr_t stream{};
  int device{-1};
  const char* entry{};             ///< nullptr: "allocate"/"free" from the action
  std::uint64_t duration_ns{};
  const char* result{};            ///< nullptr: "CUDA_SUCCESS"
};

inline constexpr std::string_view csv_log_header =
    "Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result\n";

/// Longest row format_row() can produce (entry and result are cut to 64 chars).
inline constexpr std::size_t max_row_bytes = 384;

/// Formats `row` as one CSV line ending in '\n' into `out` (at least
/// max_row_bytes), returns its length. Pure: no locale, no allocation, no
/// syscalls. Commas, quotes and control characters in entry/result become '_'.
std::size_t format_row(char* out, log_row const& row) noexcept;

class csv_log_writer {
 public:
  /// Creates (truncates) `path` and writes the header. Throws logic_error naming
  /// the path and strerror when it cannot be opened or mapped.
  explicit csv_log_writer(std::string path);
  ~csv_log_writer();
  csv_log_writer(csv_log_writer const&) = delete;
  csv_log_writer& operator=(csv_log_writer const&) = delete;
  csv_log_writer(csv_log_writer&&) = delete;
  csv_log_writer& operator=(csv_log_writer&&) = delete;

  /// Appends one row. Never throws; a row that cannot be stored (file cannot grow:
  /// disk full) is counted in dropped_rows().
  void write(log_row const& row) noexcept;
  /// Appends pre-formatted bytes (whole lines).
  void append(char const* data, std::size_t len) noexcept;

  /// Schedules write-back of the written pages (msync MS_ASYNC). Not needed for
  /// crash safety, only against a machine crash.
  void flush() noexcept;
  /// Truncates the file to the bytes written and unmaps it. Idempotent.
  void close() noexcept;

  [[nodiscard]] std::string const& path() const noexcept { return path_; }
  /// Bytes reserved so far, header included (== file size after close()).
  [[nodiscard]] std::uint64_t bytes_written() const noexcept;
  [[nodiscard]] std::uint64_t dropped_rows() const noexcept;

  struct shared_state;  // the page shared across fork (implementation detail)

 private:
  /// Makes [0, end) backed by the file and mapped in this process; false if
  /// the file cannot grow (disk full).
  bool ensure_mapped(std::uint64_t end) noexcept;
  void copy_out(std::uint64_t offset, char const* data, std::size_t len) noexcept;
  void truncate_and_unmap(bool unmap) noexcept;
  static void truncate_all_at_exit() noexcept;  // atexit hook over the live writers
  void start_prefault() noexcept;
  void stop_prefault() noexcept;
  void prefault_loop() noexcept;
  /// Populates file bytes [from, to) for writing; false when the helper must stop.
  bool populate(std::uint64_t from, std::uint64_t to) noexcept;

  static constexpr std::size_t window_bytes = std::size_t{256} << 20;  // 256 MiB of address space
  static constexpr std::size_t max_windows = 4096;                      // 1 TiB of log
  static constexpr std::uint64_t prefault_ahead = std::uint64_t{4} << 20;  // populated past the write offset
  static constexpr unsigned prefault_grain_shift = 17;                       // writers wake the helper every 128 KiB

  std::string path_;
  int fd_{-1};
  int owner_pid_{};
  shared_state* shared_{};
  /// Window k maps file bytes [k*W, (k+1)*W) in this process; set under the
  /// growth lock, read lock-free by writers.
  std::atomic<char*> windows_[max_windows]{};
  std::uint64_t final_bytes_{};   ///< bytes_written() after close()
  std::uint64_t final_dropped_{};
  csv_log_writer* next_live_{};   ///< registry for the atexit truncation
  csv_log_writer* prev_live_{};
  pthread_t prefault_thread_{};
  bool prefault_started_{false};       ///< by this process (owner_pid_); a forked child has no helper
  std::atomic<bool> prefault_on_{false};  ///< writers wake the helper
  std::atomic<bool> prefault_stop_{false};
  std::atomic<std::uint32_t> prefault_wake_{0};  ///< bumped (and notified) to wake the helper
};

}  // namespace gpumem
