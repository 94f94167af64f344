#pragma once
// Several logs of one job (ranks, processes) read together in ONE pass: events are
// merged by time, each log keeping its own file order (a thread racing to its log
// may write a slightly older time after a newer one, and re-sorting would put a
// free before its allocate). Each log gets its log_summary; two or more also get
// the combined live bytes on the merged timeline. An observer sees every event in
// merge order (gpumem-report's trace export writes as it goes).
//
// Memory: one reader buffer per log plus what each log_analyzer holds.
// Thread safety: one thread; observers are called on it.

#include "log_analysis.hpp"
#include "log_event.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace gpumem::tools {

class log_reader;

/// Receives the events of a merged pass as they are read.
class merged_event_observer {
 public:
  virtual ~merged_event_observer() = default;
  /// Before the first event: the (readable) logs and the earliest first-event time.
  virtual void begin(std::vector<log_reader*> const& logs, std::int64_t origin_ns) = 0;
  /// One event of logs[log], in merge order.
  virtual void event(std::size_t log, log_event const& ev) = 0;
  /// After the last event, with the finished summaries.
  virtual void end(std::vector<log_summary> const& summaries) = 0;
};

struct combined_summary {
  std::size_t logs{};
  std::uint64_t events{}, allocations{}, frees{}, failures{};
  std::uint64_t bytes_allocated{};
  std::uint64_t peak_live_bytes{};
  std::size_t peak_log{};                            ///< which log's event reached the peak
  log_position peak_at;                              ///< that event, in its own log (its time: the peak's)
  std::optional<std::uint64_t> peak_reserved_bytes;  ///< sum of the logs' latest Reserved, if any has it
  std::uint64_t live_at_end_bytes{};
  std::uint64_t live_at_end_count{};
  bool complete{true};                   ///< no log is marked incomplete
  std::vector<timeline_point> timeline;  ///< merged, bounded (line = 0)
};

struct merged_analysis {
  std::vector<log_summary> logs;             ///< one per reader, same order
  std::optional<combined_summary> combined;  ///< only with two or more logs
};

/// Reads every (readable) reader to its end in one merged pass. Each timeline has
/// `timeline_buckets` buckets (see timeline_builder); with more than 64 logs, each
/// log's has proportionally fewer (at least 64).
[[nodiscard]] merged_analysis analyse_merged(std::vector<log_reader*> const& readers, std::size_t top_n,
                                             merged_event_observer* observer = nullptr,
                                             std::size_t timeline_buckets = 1024);

}  // namespace gpumem::tools
