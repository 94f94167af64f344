// Single pass over a log's events: live-pointer map (hash, O(1) per event), dense
// power-of-two histogram, bounded heap for the largest allocations, bucketed
// timeline.
#include "log_analysis.hpp"
#include "log_reader.hpp"

#include <algorithm>
#include <limits>

namespace gpumem::tools {

namespace {

constexpr std::uint64_t max_u64 = std::numeric_limits<std::uint64_t>::max();

std::uint64_t saturated(wide_bytes v) noexcept { return v > max_u64 ? max_u64 : static_cast<std::uint64_t>(v); }

void add_saturating(std::uint64_t& total, std::uint64_t v) noexcept {
  total = total > max_u64 - v ? max_u64 : total + v;
}

log_position position_of(log_event const& ev) noexcept {
  return log_position{ev.index, ev.line, ev.time_ns, ev.clock_us};
}

allocation_record record_of(log_event const& ev) noexcept {
  // The reader takes devices 0..32767 only.
  return allocation_record{ev.pointer,  ev.size,         ev.thread_id, ev.stream, static_cast<std::int16_t>(ev.device),
                           ev.entry_id, position_of(ev), ev.stack};
}

/// Orders allocations "larger first, then older".
bool larger_first(allocation_record const& a, allocation_record const& b) noexcept {
  return a.size > b.size || (a.size == b.size && a.at.event_index < b.at.event_index);
}

/// Orders timed calls "slower first, then older".
bool slower_first(timed_call const& a, timed_call const& b) noexcept {
  return a.duration_ns > b.duration_ns ||
         (a.duration_ns == b.duration_ns && a.call.at.event_index < b.call.at.event_index);
}

/// Keeps `r` in the min-heap `top` (under `first`) if it is among the top `n`.
template <class T, class Order>
void keep_top(std::vector<T>& top, std::size_t n, T const& r, Order first) {
  if (n == 0 || (top.size() >= n && !first(r, top.front()))) return;
  top.push_back(r);
  std::push_heap(top.begin(), top.end(), first);
  if (top.size() > n) {
    std::pop_heap(top.begin(), top.end(), first);
    top.pop_back();
  }
}

}  // namespace

// ---- timeline ----------------------------------------------------------------------

timeline_builder::timeline_builder(std::size_t buckets)
    : buckets_(std::max<std::size_t>(buckets, 2) & ~std::size_t{1}) {}

timeline_builder::bucket timeline_builder::merged(bucket const& a, bucket const& b) noexcept {
  if (!a.used) return b;
  if (!b.used) return a;
  bucket m = a;
  m.s[last] = b.s[last];
  if (b.s[live_hi].p.live > a.s[live_hi].p.live) m.s[live_hi] = b.s[live_hi];
  if (b.s[live_lo].p.live < a.s[live_lo].p.live) m.s[live_lo] = b.s[live_lo];
  if (b.s[reserved_hi].p.reserved > a.s[reserved_hi].p.reserved) m.s[reserved_hi] = b.s[reserved_hi];
  if (a.s[reserved_lo].p.reserved < 0 ||
      (b.s[reserved_lo].p.reserved >= 0 && b.s[reserved_lo].p.reserved < a.s[reserved_lo].p.reserved)) {
    m.s[reserved_lo] = b.s[reserved_lo];
  }
  return m;
}

void timeline_builder::coarsen() {
  std::size_t const half = buckets_.size() / 2;
  for (std::size_t i = 0; i < half; ++i) buckets_[i] = merged(buckets_[2 * i], buckets_[2 * i + 1]);
  for (std::size_t i = half; i < buckets_.size(); ++i) buckets_[i] = bucket{};
  width_ *= 2;
}

void timeline_builder::add(timeline_point p) {
  if (seq_ == 0) t0_ = last_t_ = p.time_ns;
  p.time_ns = std::max(p.time_ns, last_t_);
  last_t_ = p.time_ns;
  auto const offset = static_cast<std::uint64_t>(p.time_ns) - static_cast<std::uint64_t>(t0_);
  while (offset / width_ >= buckets_.size()) coarsen();
  bucket& b = buckets_[offset / width_];
  sample const s{p, seq_++};
  if (!b.used) {
    b.used = true;
    b.s.fill(s);
    return;
  }
  b.s[last] = s;
  if (p.live > b.s[live_hi].p.live) b.s[live_hi] = s;
  if (p.live < b.s[live_lo].p.live) b.s[live_lo] = s;
  if (p.reserved > b.s[reserved_hi].p.reserved) b.s[reserved_hi] = s;
  if (p.reserved >= 0 && (b.s[reserved_lo].p.reserved < 0 || p.reserved < b.s[reserved_lo].p.reserved)) {
    b.s[reserved_lo] = s;
  }
}

std::vector<timeline_point> timeline_builder::points() const {
  std::vector<timeline_point> out;
  for (auto const& b : buckets_) {
    if (!b.used) continue;
    std::array<sample, kept> s = b.s;
    std::sort(s.begin(), s.end(), [](sample const& x, sample const& y) { return x.seq < y.seq; });
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (i == 0 || s[i].seq != s[i - 1].seq) out.push_back(s[i].p);
    }
  }
  return out;
}

std::vector<timeline_point> downsample(std::vector<timeline_point> const& tl, std::size_t max_points) {
  if (tl.size() <= max_points || max_points < 12) return tl;
  timeline_builder b{max_points / 6};
  for (auto const& p : tl) b.add(p);
  return b.points();
}

// ---- one log -------------------------------------------------------------------------

void log_analyzer::key_tracker::add(std::uint64_t key, log_event const& ev) {
  auto it = counts.find(key);
  key_counts* c = nullptr;
  if (it != counts.end()) {
    c = &it->second;
  } else if (counts.size() < key_table::max_rows) {
    c = &counts.emplace(key, key_counts{key, 0, 0, 0, 0}).first->second;
  } else {
    c = &table.others;
    table.truncated = true;
  }
  if (ev.refused) return;
  switch (ev.action) {
    case log_action::allocate:
      ++c->allocations;
      add_saturating(c->bytes_allocated, ev.size);
      break;
    case log_action::free: ++c->frees; break;
    case log_action::allocate_failure: ++c->failures; break;
  }
}

key_table log_analyzer::key_tracker::sorted() const {
  key_table t = table;
  t.rows.reserve(counts.size());
  for (auto const& [key, c] : counts) t.rows.push_back(c);
  std::sort(t.rows.begin(), t.rows.end(), [](key_counts const& a, key_counts const& b) { return a.key < b.key; });
  return t;
}

log_analyzer::log_analyzer(log_columns const& columns, std::size_t top_n, std::size_t timeline_buckets)
    : has_device_{columns.device}, has_stack_{columns.stack}, timeline_{timeline_buckets} {
  s_.top_n = top_n;
  s_.columns = columns;
  largest_.reserve(top_n + 1);
}

std::uint64_t log_analyzer::live_bytes() const noexcept { return saturated(live_bytes_); }

log_analyzer::site_state& log_analyzer::site(std::uint64_t stack) {
  auto [it, fresh] = sites_.try_emplace(stack);
  if (fresh) it->second.stats.stack = stack;
  return it->second;
}

void log_analyzer::site_live(std::uint64_t stack, std::uint64_t bytes, bool add, std::uint64_t event_index) {
  site_state& st = site(stack);
  // The first change after the peak so far keeps what the stack held at it.
  if (s_.peak_live_at && st.changed_at <= s_.peak_live_at->event_index &&
      st.at_peak_for != s_.peak_live_at->event_index) {
    st.at_peak_bytes = st.live_bytes;
    st.at_peak_count = st.live_count;
    st.at_peak_for = s_.peak_live_at->event_index;
  }
  if (add) {
    st.live_bytes += bytes;
    ++st.live_count;
  } else {
    st.live_bytes -= std::min<wide_bytes>(st.live_bytes, bytes);
    st.live_count -= std::min<std::uint64_t>(st.live_count, 1);
  }
  st.changed_at = event_index;
}

void log_analyzer::add(log_event const& ev) {
  auto& s = s_;
  if (s.events == 0) {
    s.first_time_ns = s.last_time_ns = ev.time_ns;
  } else {
    s.first_time_ns = std::min(s.first_time_ns, ev.time_ns);
    s.last_time_ns = std::max(s.last_time_ns, ev.time_ns);
  }
  ++s.events;
  threads_.add(ev.thread_id, ev);
  streams_.add(ev.stream, ev);
  if (ev.duration_ns != log_row::unmeasured) {
    ++s.timed_calls;
    add_saturating(s.timed_ns, ev.duration_ns);
    keep_top(slowest_, s.top_n, timed_call{record_of(ev), ev.action, ev.duration_ns}, slower_first);
  }
  if (!ev.device_memory()) {
    (ev.memory == memory_kind::managed ? managed_ : host_).add(ev);
    return;
  }
  if (has_device_) devices_.add(static_cast<std::uint64_t>(ev.device), ev);
  switch (ev.action) {
    case log_action::allocate: {
      ++s.allocations;
      add_saturating(s.bytes_allocated, ev.size);
      auto& b = hist_[static_cast<std::size_t>(size_bucket(ev.size))];
      ++b.count;
      add_saturating(b.bytes, ev.size);
      keep_top(largest_, s.top_n, record_of(ev), larger_first);
      if (has_stack_) {
        auto& st = site(ev.stack).stats;
        ++st.allocations;
        add_saturating(st.bytes_allocated, ev.size);
      }
      if (ev.pointer == 0) break;  // a zero-byte allocation owns nothing
      auto const [it, inserted] = live_.try_emplace(ev.pointer, record_of(ev));
      if (!inserted) {
        ++s.reused_live_pointers;
        live_bytes_ -= it->second.size;
        if (has_stack_) site_live(it->second.stack, it->second.size, false, ev.index);
        it->second = record_of(ev);
      }
      live_bytes_ += ev.size;
      if (has_stack_) site_live(ev.stack, ev.size, true, ev.index);
      break;
    }
    case log_action::free: {
      if (ev.refused) break;
      ++s.frees;
      if (ev.pointer == 0) break;
      auto const it = live_.find(ev.pointer);
      if (it == live_.end()) {
        if (s.unknown_frees.size() < s.top_n) {
          s.unknown_frees.push_back({ev.pointer, ev.size, ev.thread_id, ev.stream, position_of(ev)});
        }
        ++s.unknown_free_count;
        break;
      }
      std::uint64_t const size = it->second.size;
      live_bytes_ -= size;
      if (has_stack_) site_live(it->second.stack, size, false, ev.index);
      add_saturating(s.bytes_freed, size);
      live_.erase(it);
      break;
    }
    case log_action::allocate_failure:
      ++s.failures;
      if (s.failed.size() < s.top_n) {
        s.failed.push_back({ev.size, ev.thread_id, ev.stream, ev.entry_id, ev.result_id, position_of(ev), ev.stack});
      }
      if (has_stack_) {
        auto& st = site(ev.stack).stats;
        ++st.failures;
        add_saturating(st.failed_bytes, ev.size);
      }
      break;
  }
  std::uint64_t const live = live_bytes();
  if (live > s.peak_live_bytes) {
    s.peak_live_bytes = live;
    s.peak_live_at = position_of(ev);
  }
  if (ev.reserved >= 0) {
    reserved_ = ev.reserved;
    if (!s.peak_reserved_bytes || static_cast<std::uint64_t>(ev.reserved) > *s.peak_reserved_bytes) {
      s.peak_reserved_bytes = static_cast<std::uint64_t>(ev.reserved);
      s.peak_reserved_at = position_of(ev);
    }
  }
  timeline_.add({ev.time_ns, live, reserved_, ev.line});
}

void log_analyzer::apart_books::add(log_event const& ev) {
  auto& h = summary;
  switch (ev.action) {
    case log_action::allocate: {
      ++h.allocations;
      add_saturating(h.bytes_allocated, ev.size);
      if (ev.pointer == 0) break;
      auto const [it, inserted] = live.try_emplace(ev.pointer, ev.size);
      if (!inserted) {
        live_bytes -= it->second;
        it->second = ev.size;
      }
      live_bytes += ev.size;
      break;
    }
    case log_action::free: {
      if (ev.refused) break;
      ++h.frees;
      auto const it = live.find(ev.pointer);
      if (it == live.end()) break;  // a registration's unregister, or an unknown pointer
      live_bytes -= it->second;
      live.erase(it);
      break;
    }
    case log_action::allocate_failure: ++h.failures; break;
  }
  if (live_bytes > h.peak_live_bytes) {
    h.peak_live_bytes = live_bytes;
    h.peak_live_at = position_of(ev);
  }
}

apart_memory_summary log_analyzer::apart_books::finish() const {
  apart_memory_summary s = summary;
  s.live_at_end_bytes = live_bytes;
  s.live_at_end_count = live.size();
  return s;
}

log_summary log_analyzer::finish(log_reader const& reader) {
  log_summary s = std::move(s_);
  static_cast<log_file_info&>(s) = reader.info();

  s.live_at_end_bytes = live_bytes();
  s.live_at_end_count = live_.size();
  s.host = host_.finish();
  s.managed = managed_.finish();
  std::vector<allocation_record> live;
  live.reserve(live_.size());
  for (auto const& [ptr, r] : live_) live.push_back(r);
  std::size_t const shown = std::min(s.top_n, live.size());
  std::partial_sort(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(shown), live.end(), larger_first);
  live.resize(shown);
  s.live_at_end = std::move(live);

  for (std::size_t k = 0; k < hist_.size(); ++k) {
    if (hist_[k].count == 0) continue;
    histogram_bucket b = hist_[k];
    b.lo = k == 0 ? 0 : std::uint64_t{1} << (k - 1);
    b.hi = k == 0 ? 0 : (k == 64 ? max_u64 : (std::uint64_t{1} << k) - 1);
    s.histogram.push_back(b);
  }
  std::sort_heap(largest_.begin(), largest_.end(), larger_first);
  s.largest = std::move(largest_);
  std::sort_heap(slowest_.begin(), slowest_.end(), slower_first);
  s.slowest = std::move(slowest_);
  s.threads = threads_.sorted();
  s.streams = streams_.sorted();
  s.devices = devices_.sorted();
  s.timeline = timeline_.points();
  s.call_sites.reserve(sites_.size());
  for (auto& [stack, st] : sites_) {
    call_site_stats c = st.stats;
    c.live_at_end_bytes = saturated(st.live_bytes);
    c.live_at_end_count = st.live_count;
    if (s.peak_live_at) {
      std::uint64_t const peak = s.peak_live_at->event_index;
      if (st.changed_at <= peak) {
        c.live_at_peak_bytes = saturated(st.live_bytes);
        c.live_at_peak_count = st.live_count;
      } else if (st.at_peak_for == peak) {
        c.live_at_peak_bytes = saturated(st.at_peak_bytes);
        c.live_at_peak_count = st.at_peak_count;
      }
    }
    s.call_sites.push_back(c);
  }
  std::sort(s.call_sites.begin(), s.call_sites.end(),
            [](call_site_stats const& a, call_site_stats const& b) { return a.stack < b.stack; });
  return s;
}

log_summary analyze(std::string_view text, std::string name, std::size_t top_n) {
  log_reader reader{text, std::move(name)};
  log_analyzer a{reader.columns(), top_n};
  log_event ev;
  while (reader.next(ev)) a.add(ev);
  return a.finish(reader);
}

}  // namespace gpumem::tools
