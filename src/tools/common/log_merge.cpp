#include "log_merge.hpp"
#include "log_reader.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <utility>

namespace gpumem::tools {

merged_analysis analyse_merged(std::vector<log_reader*> const& readers, std::size_t top_n,
                               merged_event_observer* observer, std::size_t timeline_buckets) {
  std::size_t const n = readers.size();
  // Hundreds of ranks: each log's timeline gets fewer buckets (a plot of that many
  // lines shows no more), so memory grows slowly with the number of logs.
  std::size_t const per_log_buckets = n <= 1 ? timeline_buckets
                                             : std::clamp<std::size_t>(64 * timeline_buckets / n, 64, timeline_buckets);
  std::vector<log_analyzer> analyzers;
  analyzers.reserve(n);
  for (auto* r : readers) analyzers.emplace_back(r->columns(), top_n, per_log_buckets);

  // Heads: the time of each log's next event. Ties go to the earlier log.
  using head = std::pair<std::int64_t, std::size_t>;
  std::priority_queue<head, std::vector<head>, std::greater<>> heads;
  std::vector<log_event> next(n);
  std::int64_t origin = std::numeric_limits<std::int64_t>::max();
  for (std::size_t l = 0; l < n; ++l) {
    if (readers[l]->next(next[l])) {
      heads.emplace(next[l].time_ns, l);
      origin = std::min(origin, next[l].time_ns);
    }
  }
  if (heads.empty()) origin = 0;
  if (observer != nullptr) observer->begin(readers, origin);

  combined_summary c;
  c.logs = n;
  timeline_builder timeline{timeline_buckets};
  // The sums over the logs of each analyzer's live bytes and latest Reserved value,
  // kept up to date by the change each event makes to its own log's.
  wide_bytes live = 0;
  std::int64_t reserved = 0;
  while (!heads.empty()) {
    std::size_t const l = heads.top().second;
    heads.pop();
    log_event const& ev = next[l];
    std::uint64_t const live_before = analyzers[l].live_bytes();
    std::int64_t const reserved_before = std::max<std::int64_t>(analyzers[l].reserved_bytes(), 0);
    analyzers[l].add(ev);
    if (observer != nullptr) observer->event(l, ev);
    if (n > 1) {
      live = live - live_before + analyzers[l].live_bytes();
      std::uint64_t const live_now = live > std::numeric_limits<std::uint64_t>::max()
                                         ? std::numeric_limits<std::uint64_t>::max()
                                         : static_cast<std::uint64_t>(live);
      // Only device rows move the reserved sum, as each log's analysis does: a pinned
      // host row's Reserved is the host chain's.
      if (ev.reserved >= 0 && ev.device_memory()) {
        reserved += ev.reserved - reserved_before;
        if (!c.peak_reserved_bytes || static_cast<std::uint64_t>(reserved) > *c.peak_reserved_bytes) {
          c.peak_reserved_bytes = static_cast<std::uint64_t>(reserved);
        }
      }
      if (live_now > c.peak_live_bytes) {
        c.peak_live_bytes = live_now;
        c.peak_log = l;
        c.peak_at = log_position{ev.index, ev.line, ev.time_ns, ev.clock_us};
      }
      timeline.add({ev.time_ns, live_now, c.peak_reserved_bytes ? reserved : -1, 0});
    }
    if (readers[l]->next(next[l])) heads.emplace(next[l].time_ns, l);
  }

  merged_analysis m;
  m.logs.reserve(n);
  for (std::size_t l = 0; l < n; ++l) m.logs.push_back(analyzers[l].finish(*readers[l]));
  if (n > 1) {
    for (auto const& s : m.logs) {
      c.events += s.events;
      c.allocations += s.allocations;
      c.frees += s.frees;
      c.failures += s.failures;
      c.bytes_allocated += s.bytes_allocated;
      c.live_at_end_bytes += s.live_at_end_bytes;
      c.live_at_end_count += s.live_at_end_count;
      c.complete = c.complete && s.complete();
    }
    c.timeline = timeline.points();
    m.combined = std::move(c);
  }
  if (observer != nullptr) observer->end(m.logs);
  return m;
}

}  // namespace gpumem::tools
