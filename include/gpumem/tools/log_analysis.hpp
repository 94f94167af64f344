#pragma once
// What a parsed allocation log says: live bytes over time, peak, leaks, failures,
// size histogram, per-thread/per-stream counts, and the same for several logs of
// one job merged on one timeline.
//
// Accounting: an allocate adds its size to the live bytes under its pointer; a
// free removes the size recorded by the matching allocate (not the free's own
// Size column, which a caller may get wrong). A free of a pointer that is not live
// is listed as an unknown free and changes nothing; an allocate of a pointer that
// is already live replaces the old record (also counted, as a reused live pointer).
// Null frees and zero-byte allocations (null pointer) are counted but own nothing.
//
// Thread safety: pure functions over values.

#include <gpumem/tools/alloc_log.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpumem::tools {

/// Where in a log something happened.
struct log_position {
  std::size_t event_index{};  ///< 0-based index into parsed_log::events
  std::uint32_t line{};       ///< 1-based file line
  std::int64_t time_ns{};     ///< the event's time (see alloc_log.hpp)
  std::int64_t clock_us{-1};  ///< Time column (µs since midnight), -1 if absent
};

struct allocation_record {
  std::uint64_t pointer{};
  std::uint64_t size{};
  std::uint64_t thread{};
  std::uint64_t stream{};
  std::int16_t device{-1};
  std::uint16_t entry{};  ///< parsed_log::strings index
  log_position at;
};

struct failure_record {
  std::uint64_t size{};
  std::uint64_t thread{};
  std::uint64_t stream{};
  std::uint16_t entry{};
  std::uint16_t result{};  ///< parsed_log::strings index; 0 = not in log
  log_position at;
};

struct unknown_free_record {
  std::uint64_t pointer{};
  std::uint64_t size{};
  std::uint64_t thread{};
  std::uint64_t stream{};
  log_position at;
};

/// Sizes in [lo, hi]: lo = 2^k, hi = 2^(k+1) - 1; the bucket of size 0 has lo = hi = 0.
struct histogram_bucket {
  std::uint64_t lo{}, hi{};
  std::uint64_t count{}, bytes{};
};

/// Events attributed to one thread or one stream.
struct key_counts {
  std::uint64_t key{};
  std::uint64_t allocations{}, frees{}, failures{};
  std::uint64_t bytes_allocated{};
};

/// One point per event: live (and reserved, when logged) bytes after it.
struct timeline_point {
  std::int64_t time_ns{};
  std::uint64_t live{};
  std::int64_t reserved{-1};
  std::uint32_t line{};  ///< file line of the event (0 in a merged timeline)
};

struct log_summary {
  std::string path;
  std::string dialect;
  std::uint64_t events{}, allocations{}, frees{}, failures{};
  std::uint64_t bytes_allocated{}, bytes_freed{};
  std::uint64_t peak_live_bytes{};
  std::optional<log_position> peak_live_at;   ///< empty when nothing was ever live
  std::uint64_t live_at_end_bytes{};
  std::vector<allocation_record> leaks;       ///< never freed; largest first, then oldest
  std::vector<histogram_bucket> histogram;    ///< successful allocations; non-empty buckets, ascending
  std::vector<allocation_record> largest;     ///< top_n largest successful allocations, largest first
  std::vector<failure_record> failed;         ///< all failures, in order
  std::vector<unknown_free_record> unknown_frees;
  std::uint64_t reused_live_pointers{};       ///< allocate of a pointer already live
  std::vector<key_counts> threads, streams;   ///< ascending key
  std::vector<key_counts> devices;            ///< ascending ordinal; empty without a Device column
  std::optional<std::uint64_t> peak_reserved_bytes;  ///< only if the log has Reserved
  std::optional<log_position> peak_reserved_at;
  std::int64_t first_time_ns{}, last_time_ns{};
  std::vector<timeline_point> timeline;       ///< one per event
};

/// Analyses one readable log; `top_n` bounds `largest`.
[[nodiscard]] log_summary analyze(parsed_log const& log, std::size_t top_n = 10);

/// Several logs (ranks of one job) on one timeline, merged by event time.
struct combined_summary {
  std::size_t logs{};
  std::uint64_t events{}, allocations{}, frees{}, failures{};
  std::uint64_t bytes_allocated{};
  std::uint64_t peak_live_bytes{};
  std::int64_t peak_time_ns{};
  std::size_t peak_log{};                      ///< which log's event reached the peak
  log_position peak_at;                        ///< that event, in its own log
  std::uint64_t live_at_end_bytes{};
  std::uint64_t leaked_allocations{};
  std::vector<timeline_point> timeline;        ///< merged, one per event (line = 0)
};

/// Merges the summaries' timelines (stable for equal times: log order, then file order).
[[nodiscard]] combined_summary combine(std::vector<log_summary const*> const& logs);

/// Index of bucket for `size` in a dense power-of-two histogram (0 for size 0, k+1 for 2^k..).
[[nodiscard]] constexpr int size_bucket(std::uint64_t size) noexcept {
  return size == 0 ? 0 : 64 - __builtin_clzll(size);
}

/// Keeps at most `max_points` points of a timeline for plotting: per slice of time,
/// the first and last point and the points with the slice's highest and lowest live
/// bytes, in order, so peaks survive down-sampling.
[[nodiscard]] std::vector<timeline_point> downsample(std::vector<timeline_point> const& tl, std::size_t max_points);

}  // namespace gpumem::tools
