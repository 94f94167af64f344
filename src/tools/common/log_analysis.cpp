// Single pass over a parsed log: live-pointer map (hash, O(1) per event), dense
// power-of-two histogram, bounded heap for the largest allocations.
#include <gpumem/tools/log_analysis.hpp>

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <queue>
#include <unordered_map>
#include <utility>

namespace gpumem::tools {

namespace {

log_position position_of(log_event const& ev, std::size_t index) noexcept {
  return log_position{index, ev.line, ev.time_ns, ev.clock_us};
}

allocation_record record_of(log_event const& ev, std::size_t index) noexcept {
  return allocation_record{ev.pointer, ev.size, ev.thread, ev.stream, ev.device, ev.entry, position_of(ev, index)};
}

std::vector<key_counts> sorted_counts(std::unordered_map<std::uint64_t, key_counts> const& m) {
  std::vector<key_counts> v;
  v.reserve(m.size());
  for (auto const& [key, c] : m) v.push_back(c);
  std::sort(v.begin(), v.end(), [](key_counts const& a, key_counts const& b) { return a.key < b.key; });
  return v;
}

void count(std::unordered_map<std::uint64_t, key_counts>& m, std::uint64_t key, log_event const& ev) {
  auto& c = m.try_emplace(key, key_counts{key, 0, 0, 0, 0}).first->second;
  switch (ev.action) {
    case log_action::allocate:
      ++c.allocations;
      c.bytes_allocated += ev.size;
      break;
    case log_action::free: ++c.frees; break;
    case log_action::allocate_failure: ++c.failures; break;
  }
}

}  // namespace

log_summary analyze(parsed_log const& log, std::size_t top_n) {
  log_summary s;
  s.path = log.path;
  s.dialect = std::string{log.dialect()};
  auto const& events = log.events;
  s.events = events.size();
  s.timeline.reserve(events.size());

  std::unordered_map<std::uint64_t, std::size_t> live;  // pointer -> index of its allocate
  std::array<histogram_bucket, 65> hist{};
  std::unordered_map<std::uint64_t, key_counts> threads, streams, devices;

  // Min-heap on "how large": its top is the smallest of the current top_n.
  using ranked = std::pair<std::uint64_t, std::size_t>;  // size, event index
  auto larger = [](ranked const& a, ranked const& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::priority_queue<ranked, std::vector<ranked>, decltype(larger)> top{larger};

  std::uint64_t live_bytes = 0;
  std::int64_t reserved_now = -1;
  if (!events.empty()) {
    s.first_time_ns = std::numeric_limits<std::int64_t>::max();
    s.last_time_ns = std::numeric_limits<std::int64_t>::min();
  }
  for (std::size_t i = 0; i < events.size(); ++i) {
    log_event const& ev = events[i];
    s.first_time_ns = std::min(s.first_time_ns, ev.time_ns);
    s.last_time_ns = std::max(s.last_time_ns, ev.time_ns);
    count(threads, ev.thread, ev);
    count(streams, ev.stream, ev);
    if (log.columns.device) count(devices, static_cast<std::uint64_t>(ev.device), ev);
    switch (ev.action) {
      case log_action::allocate: {
        ++s.allocations;
        s.bytes_allocated += ev.size;
        auto& b = hist[static_cast<std::size_t>(size_bucket(ev.size))];
        ++b.count;
        b.bytes += ev.size;
        if (top_n > 0 && (top.size() < top_n || larger({ev.size, i}, top.top()))) {
          top.emplace(ev.size, i);
          if (top.size() > top_n) top.pop();
        }
        if (ev.pointer == 0) break;  // a zero-byte allocation owns nothing
        auto const [it, inserted] = live.try_emplace(ev.pointer, i);
        if (!inserted) {
          ++s.reused_live_pointers;
          live_bytes -= events[it->second].size;
          it->second = i;
        }
        live_bytes += ev.size;
        break;
      }
      case log_action::free: {
        ++s.frees;
        if (ev.pointer == 0) break;
        auto const it = live.find(ev.pointer);
        if (it == live.end()) {
          s.unknown_frees.push_back({ev.pointer, ev.size, ev.thread, ev.stream, position_of(ev, i)});
          break;
        }
        std::uint64_t const size = events[it->second].size;
        live_bytes -= size;
        s.bytes_freed += size;
        live.erase(it);
        break;
      }
      case log_action::allocate_failure:
        ++s.failures;
        s.failed.push_back({ev.size, ev.thread, ev.stream, ev.entry, ev.result, position_of(ev, i)});
        break;
    }
    if (live_bytes > s.peak_live_bytes) {
      s.peak_live_bytes = live_bytes;
      s.peak_live_at = position_of(ev, i);
    }
    if (ev.reserved >= 0) {
      reserved_now = ev.reserved;
      if (!s.peak_reserved_bytes || static_cast<std::uint64_t>(ev.reserved) > *s.peak_reserved_bytes) {
        s.peak_reserved_bytes = static_cast<std::uint64_t>(ev.reserved);
        s.peak_reserved_at = position_of(ev, i);
      }
    }
    s.timeline.push_back({ev.time_ns, live_bytes, reserved_now, ev.line});
  }
  s.live_at_end_bytes = live_bytes;

  s.leaks.reserve(live.size());
  for (auto const& [ptr, index] : live) s.leaks.push_back(record_of(events[index], index));
  std::sort(s.leaks.begin(), s.leaks.end(), [](allocation_record const& a, allocation_record const& b) {
    return a.size > b.size || (a.size == b.size && a.at.event_index < b.at.event_index);
  });

  for (std::size_t k = 0; k < hist.size(); ++k) {
    if (hist[k].count == 0) continue;
    histogram_bucket b = hist[k];
    b.lo = k == 0 ? 0 : std::uint64_t{1} << (k - 1);
    b.hi = k == 0 ? 0 : (k == 64 ? std::numeric_limits<std::uint64_t>::max() : (std::uint64_t{1} << k) - 1);
    s.histogram.push_back(b);
  }

  s.largest.resize(top.size());
  for (std::size_t k = top.size(); k-- > 0;) {
    s.largest[k] = record_of(events[top.top().second], top.top().second);
    top.pop();
  }
  s.threads = sorted_counts(threads);
  s.streams = sorted_counts(streams);
  s.devices = sorted_counts(devices);
  return s;
}

combined_summary combine(std::vector<log_summary const*> const& logs) {
  combined_summary c;
  c.logs = logs.size();
  std::size_t total = 0;
  for (auto const* log : logs) {
    auto const& s = *log;
    c.events += s.events;
    c.allocations += s.allocations;
    c.frees += s.frees;
    c.failures += s.failures;
    c.bytes_allocated += s.bytes_allocated;
    c.live_at_end_bytes += s.live_at_end_bytes;
    c.leaked_allocations += s.leaks.size();
    total += s.timeline.size();
  }
  c.timeline.reserve(total);

  // k-way merge by time that keeps each log's own (file) order: within one log a
  // thread racing to the log may write a slightly older time after a newer one,
  // and re-sorting it would put a free before its allocate.
  using head = std::pair<std::int64_t, std::size_t>;  // time of next event, log
  std::priority_queue<head, std::vector<head>, std::greater<>> heads;
  std::vector<std::size_t> next(logs.size(), 0);
  std::vector<std::uint64_t> live(logs.size(), 0);
  for (std::size_t l = 0; l < logs.size(); ++l) {
    if (!logs[l]->timeline.empty()) heads.emplace(logs[l]->timeline[0].time_ns, l);
  }
  std::uint64_t combined_live = 0;
  while (!heads.empty()) {
    auto const [t, l] = heads.top();
    heads.pop();
    auto const& p = logs[l]->timeline[next[l]];
    combined_live = combined_live - live[l] + p.live;
    live[l] = p.live;
    c.timeline.push_back({p.time_ns, combined_live, -1, 0});
    if (combined_live > c.peak_live_bytes) {
      c.peak_live_bytes = combined_live;
      c.peak_time_ns = p.time_ns;
      c.peak_log = l;
      c.peak_at = log_position{next[l], p.line, p.time_ns, -1};
    }
    if (++next[l] < logs[l]->timeline.size()) heads.emplace(logs[l]->timeline[next[l]].time_ns, l);
  }
  return c;
}

std::vector<timeline_point> downsample(std::vector<timeline_point> const& tl, std::size_t max_points) {
  if (tl.size() <= max_points || max_points < 4) return tl;
  std::size_t const slices = max_points / 4;  // up to 4 points kept per slice
  std::int64_t const t0 = tl.front().time_ns;
  std::int64_t const span = std::max<std::int64_t>(tl.back().time_ns - t0, 1);
  std::vector<timeline_point> out;
  out.reserve(slices * 3);
  std::size_t i = 0;
  while (i < tl.size()) {
    // Slice of the point i: all following points that fall in the same slice.
    auto slice_of = [&](std::int64_t t) {
      auto const rel = static_cast<double>(std::max<std::int64_t>(t - t0, 0)) / static_cast<double>(span);
      return std::min(static_cast<std::size_t>(rel * static_cast<double>(slices)), slices - 1);
    };
    std::size_t const slice = slice_of(tl[i].time_ns);
    std::size_t j = i, hi = i, lo = i;
    while (j < tl.size() && slice_of(tl[j].time_ns) <= slice) {
      if (tl[j].live > tl[hi].live) hi = j;
      if (tl[j].live < tl[lo].live) lo = j;
      ++j;
    }
    std::array<std::size_t, 4> keep{i, std::min(hi, lo), std::max(hi, lo), j - 1};
    std::size_t last = std::numeric_limits<std::size_t>::max();
    for (std::size_t k : keep) {
      if (k != last) out.push_back(tl[k]);
      last = k;
    }
    i = j;
  }
  return out;
}

}  // namespace gpumem::tools
