#pragma once
// What an allocation log says — live bytes over time, peak, allocations still live
// at the end, failures, size histogram, per-thread/stream/device counts — computed
// in one pass over the events. Memory is bounded by the allocations live at one
// time plus fixed-size summaries (a 65-bucket histogram, top-N tables, a timeline
// of at most a few thousand points), never by the number of rows.
//
// Accounting: an allocate adds its size to the live bytes under its pointer; a
// free removes the size recorded by the matching allocate (not the free's own
// Size column, which a caller may get wrong). A free of a pointer that is not live
// is counted as an unknown free and changes nothing; an allocate of a pointer that
// is already live replaces the old record (also counted, as a reused live pointer).
// Null frees and zero-byte allocations (null pointer) are counted but own nothing.
// Byte totals saturate at 2^64 - 1 instead of wrapping.
//
// Leaks: allocations live at the end of a complete log were never freed. In a log
// marked incomplete (its writer dropped rows) they are only "still live when the
// log ends": their frees may be among the lost rows.
//
// Thread safety: an analyzer or builder is used by one thread at a time; the
// results are plain values.

#include "log_event.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gpumem::tools {

class log_reader;
struct parsed_log;

/// Byte sums wider than 64 bits, so that sums of hostile sizes saturate instead of
/// wrapping (`__extension__`: a GCC/Clang type outside ISO C++).
__extension__ using wide_bytes = unsigned __int128;

/// Where in a log something happened.
struct log_position {
  std::uint64_t event_index{};  ///< 0-based among the log's events
  std::uint32_t line{};         ///< 1-based file line
  std::int64_t time_ns{};       ///< the event's time (see log_reader.hpp)
  std::int64_t clock_us{-1};    ///< Time column (µs since midnight), -1 if absent
};

struct allocation_record {
  std::uint64_t pointer{};
  std::uint64_t size{};
  std::uint64_t thread{};
  std::uint64_t stream{};
  std::int16_t device{-1};
  std::uint16_t entry{};  ///< log_summary::strings index
  log_position at;
  std::uint64_t stack{};  ///< Stack column (0: none)
};

/// A call whose row says how long it took (DurationNs: it reached the driver or the
/// pool's slow path; calls served from the free lists are not timed).
struct timed_call {
  allocation_record call;  ///< pointer 0 for a failure
  log_action action{};
  std::uint64_t duration_ns{};
};

struct failure_record {
  std::uint64_t size{};
  std::uint64_t thread{};
  std::uint64_t stream{};
  std::uint16_t entry{};
  std::uint16_t result{};  ///< log_summary::strings index; 0 = not in log
  log_position at;
  std::uint64_t stack{};  ///< Stack column (0: none)
};

struct unknown_free_record {
  std::uint64_t pointer{};
  std::uint64_t size{};
  std::uint64_t thread{};
  std::uint64_t stream{};
  log_position at;
};

/// What the events of one recorded call stack add up to (logs with a Stack column).
/// Stack 0 gathers the events that have no stack (not sampled, or stacks were off).
/// At the peak: the bytes and allocations of this stack live right after the event
/// of peak live bytes (the sum over all stacks is the peak).
struct call_site_stats {
  std::uint64_t stack{};
  std::uint64_t allocations{}, bytes_allocated{};
  std::uint64_t live_at_end_bytes{}, live_at_end_count{};
  std::uint64_t live_at_peak_bytes{}, live_at_peak_count{};
  std::uint64_t failures{}, failed_bytes{};
};

/// Sizes in [lo, hi]: lo = 2^k, hi = 2^(k+1) - 1 (the top bucket ends at 2^64 - 1);
/// the bucket of size 0 has lo = hi = 0.
struct histogram_bucket {
  std::uint64_t lo{}, hi{};
  std::uint64_t count{}, bytes{};
};

/// Index of bucket for `size` in a dense power-of-two histogram (0 for size 0, k+1 for 2^k..).
[[nodiscard]] constexpr int size_bucket(std::uint64_t size) noexcept {
  return size == 0 ? 0 : 64 - __builtin_clzll(size);
}

/// Events attributed to one thread, stream or device.
struct key_counts {
  std::uint64_t key{};
  std::uint64_t allocations{}, frees{}, failures{};
  std::uint64_t bytes_allocated{};
};

/// Counts per key, for at most max_rows distinct keys; events of further keys are
/// summed in `others` (a hostile log cannot grow the table without bound).
struct key_table {
  static constexpr std::size_t max_rows = 1024;
  std::vector<key_counts> rows;  ///< ascending key
  key_counts others;             ///< events of keys beyond max_rows (key unused)
  bool truncated{};              ///< some keys are only in `others`
};

/// Live (and reserved, when logged) bytes after an event.
struct timeline_point {
  std::int64_t time_ns{};
  std::uint64_t live{};
  std::int64_t reserved{-1};
  std::uint32_t line{};  ///< file line of the event (0 in a merged timeline)
};

/// A timeline of any length kept in a fixed number of time buckets: per bucket the
/// first and last point and the points of highest and lowest live and reserved
/// bytes, so peaks and troughs survive. When time runs past the last bucket, the
/// buckets are merged in pairs (each covers twice the time).
/// Times are made non-decreasing (a point older than the one before, as racing
/// threads write, is placed at the same time) so the line never steps back.
class timeline_builder {
 public:
  explicit timeline_builder(std::size_t buckets = 1024);
  void add(timeline_point p);
  /// At most 6 points per bucket, in the order they were added.
  [[nodiscard]] std::vector<timeline_point> points() const;

 private:
  struct sample {
    timeline_point p;
    std::uint64_t seq{};
  };
  enum { first, last, live_hi, live_lo, reserved_hi, reserved_lo, kept };
  struct bucket {
    bool used{};
    std::array<sample, kept> s{};
  };
  static bucket merged(bucket const& a, bucket const& b) noexcept;
  void coarsen();

  std::vector<bucket> buckets_;
  std::int64_t t0_{}, last_t_{};
  std::uint64_t width_{1};
  std::uint64_t seq_{};
};

/// Keeps at most `max_points` points of a timeline for plotting (see timeline_builder).
[[nodiscard]] std::vector<timeline_point> downsample(std::vector<timeline_point> const& tl, std::size_t max_points);

/// The rows of one memory kind kept apart from device memory (log_event::memory:
/// pinned host, managed): they move no device figure (peaks, Reserved, histogram,
/// largest, failures, timeline, call sites, leaks), and have these of their own.
struct apart_memory_summary {
  std::uint64_t allocations{}, frees{}, failures{};
  std::uint64_t bytes_allocated{};
  std::uint64_t peak_live_bytes{};
  std::optional<log_position> peak_live_at;
  std::uint64_t live_at_end_bytes{}, live_at_end_count{};
  [[nodiscard]] bool any() const noexcept { return allocations + frees + failures != 0; }
};

/// A log (the file: log_file_info; complete() means allocations live at the end are
/// leaks) and what its events say.
struct log_summary : log_file_info {
  std::size_t top_n{};  ///< bound of the lists below
  std::uint64_t events{}, allocations{}, frees{}, failures{};
  std::uint64_t bytes_allocated{}, bytes_freed{};
  std::uint64_t peak_live_bytes{};
  std::optional<log_position> peak_live_at;          ///< empty when nothing was ever live
  std::optional<std::uint64_t> peak_reserved_bytes;  ///< only if the log has Reserved values
  std::optional<log_position> peak_reserved_at;
  std::uint64_t live_at_end_bytes{};
  std::uint64_t live_at_end_count{};
  std::vector<allocation_record> live_at_end;  ///< largest first, then oldest; at most top_n
  std::vector<histogram_bucket> histogram;     ///< successful allocations; non-empty buckets, ascending
  std::vector<allocation_record> largest;      ///< top_n largest successful allocations, largest first
  std::vector<failure_record> failed;          ///< the first top_n failures, in order (`failures` counts all)
  std::uint64_t timed_calls{};                 ///< rows with a DurationNs, every kind of memory
  std::uint64_t timed_ns{};                    ///< their durations summed
  std::vector<timed_call> slowest;             ///< top_n of them by duration, slowest first
  std::uint64_t unknown_free_count{};
  std::vector<unknown_free_record> unknown_frees;  ///< the first top_n
  std::uint64_t reused_live_pointers{};            ///< allocate of a pointer already live
  key_table threads, streams;
  key_table devices;  ///< empty without a Device column
  std::int64_t first_time_ns{}, last_time_ns{};
  std::vector<timeline_point> timeline;  ///< bounded (timeline_builder)
  /// Per recorded stack (only when the log has a Stack column); bounded by the
  /// stack table's size (the shim records at most 49152 stacks per process).
  std::vector<call_site_stats> call_sites;
  apart_memory_summary host;     ///< pinned host memory, kept apart
  apart_memory_summary managed;  ///< managed memory, kept apart
};

/// One log's events, in file order, into a log_summary.
class log_analyzer {
 public:
  explicit log_analyzer(log_columns const& columns, std::size_t top_n = 10, std::size_t timeline_buckets = 1024);

  void add(log_event const& ev);
  /// Live bytes after the events added so far (saturated).
  [[nodiscard]] std::uint64_t live_bytes() const noexcept;
  /// The last Reserved value seen, -1 before any.
  [[nodiscard]] std::int64_t reserved_bytes() const noexcept { return reserved_; }
  /// The summary, with what `reader` learned about the log (path, warnings,
  /// incomplete marker...). Call once, after the last add().
  [[nodiscard]] log_summary finish(log_reader const& reader);

 private:
  struct key_tracker {
    std::unordered_map<std::uint64_t, key_counts> counts;
    key_table table;
    void add(std::uint64_t key, log_event const& ev);
    [[nodiscard]] key_table sorted() const;
  };

  /// A stack's totals and its live bytes over time, kept lazily: `at_peak` is
  /// what it held at peak `peak_for` (see call_site_stats).
  struct site_state {
    call_site_stats stats;
    wide_bytes live_bytes{};
    std::uint64_t live_count{};
    std::uint64_t changed_at{};  ///< event index of the last change of live
    wide_bytes at_peak_bytes{};
    std::uint64_t at_peak_count{};
    std::optional<std::uint64_t> at_peak_for;
  };
  site_state& site(std::uint64_t stack);
  void site_live(std::uint64_t stack, std::uint64_t bytes, bool add, std::uint64_t event_index);
  /// The books of a memory kind kept apart: its summary and its live pointers.
  struct apart_books {
    apart_memory_summary summary;
    std::unordered_map<std::uint64_t, std::uint64_t> live;  ///< pointer -> bytes
    std::uint64_t live_bytes{};
    void add(log_event const& ev);
    [[nodiscard]] apart_memory_summary finish() const;
  };

  log_summary s_;
  bool has_device_;
  bool has_stack_;
  std::unordered_map<std::uint64_t, site_state> sites_;
  std::unordered_map<std::uint64_t, allocation_record> live_;
  wide_bytes live_bytes_{};
  apart_books host_, managed_;
  std::int64_t reserved_{-1};
  std::array<histogram_bucket, 65> hist_{};
  std::vector<allocation_record> largest_;  ///< min-heap: its front is the smallest kept
  std::vector<timed_call> slowest_;         ///< min-heap: its front is the quickest kept
  key_tracker threads_, streams_, devices_;
  timeline_builder timeline_;
};

/// Reads and analyses a whole log held in memory (tests, small logs).
[[nodiscard]] log_summary analyze(std::string_view text, std::string name, std::size_t top_n = 10);

}  // namespace gpumem::tools
