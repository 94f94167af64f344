// Terminal rendering: one block per log, then (several logs) a side-by-side table
// and the totals of the merged timeline. Text from the log is escaped (escape_text).
#include "report.hpp"

#include "units.hpp"

#include "text_escape.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace gpumem::tools {

namespace {

using out_it = std::back_insert_iterator<std::string>;

std::string plural(std::uint64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string bytes_exact(std::uint64_t b) {
  return b < 1024 ? human_bytes(b) : fmt::format("{} ({} B)", human_bytes(b), b);
}

std::string or_dash(std::string_view s) { return s.empty() ? std::string{"-"} : escape_text(s); }

void more(out_it out, std::uint64_t total, std::size_t shown) {
  if (total > shown) fmt::format_to(out, "    ... {} more (--top)\n", total - shown);
}

void allocation_table(out_it out, log_summary const& s, std::vector<allocation_record> const& rows,
                      std::uint64_t total) {
  fmt::format_to(out, "    {:>12}  {:<28} {:>8} {:>8} {:<14} {:<18} {:>8}\n", "size", "time", "thread", "stream",
                 "entry", "pointer", "line");
  for (auto const& r : rows) {
    fmt::format_to(out, "    {:>12}  {:<28} {:>8} {:>8} {:<14} {:<18} {:>8}\n", human_bytes(r.size),
                   describe_when(r.at, s.first_time_ns), r.thread, hex(r.stream), or_dash(s.string(r.entry)),
                   hex(r.pointer), r.at.line);
  }
  more(out, total, rows.size());
}

void keyed(out_it out, char const* title, key_table const& t, bool hex_key, char const* key_name) {
  fmt::format_to(out, "\n  {} ({}{}):\n", title, t.rows.size(), t.truncated ? "+" : "");
  fmt::format_to(out, "    {:>18} {:>10} {:>10} {:>9} {:>12}\n", key_name, "allocs", "frees", "failures", "bytes");
  auto row = [&](std::string const& key, key_counts const& k) {
    fmt::format_to(out, "    {:>18} {:>10} {:>10} {:>9} {:>12}\n", key, k.allocations, k.frees, k.failures,
                   human_bytes(k.bytes_allocated));
  };
  for (auto const& k : t.rows) row(hex_key ? hex(k.key) : fmt::format("{}", k.key), k);
  if (t.truncated) row("(others)", t.others);
}

void call_sites(out_it out, log_summary const& s, call_site_report const& c);

/// A memory kind kept apart (pinned host, managed) moves no device figure: a line of
/// its own, when the log has its rows.
void apart_line(out_it out, std::string_view label, apart_memory_summary const& m) {
  if (!m.any()) return;
  fmt::format_to(out, "  {:<13}  {} ({}), {}, {}; peak live {}", label,
                 plural(m.allocations, "allocation", "allocations"), human_bytes(m.bytes_allocated),
                 plural(m.frees, "free", "frees"), plural(m.failures, "failure", "failures"),
                 human_bytes(m.peak_live_bytes));
  if (m.peak_live_at) fmt::format_to(out, " (line {})", m.peak_live_at->line);
  fmt::format_to(out, ", live at end {} in {}\n", human_bytes(m.live_at_end_bytes),
                 plural(m.live_at_end_count, "allocation", "allocations"));
}

void one_log(out_it out, log_summary const& s, call_site_report const* sites) {
  fmt::format_to(out, "== {} ({} log, {} columns) ==\n", escape_text(s.path), s.dialect(), s.columns.count);
  if (!s.complete()) {
    fmt::format_to(out,
                   "  !! INCOMPLETE LOG: {} (marker at line {}).\n"
                   "  !! Allocations live at its end may have been freed in the lost rows: none is called a leak.\n",
                   escape_text(incomplete_reason(*s.incomplete)), s.incomplete->line);
  }
  fmt::format_to(out, "  events         {}: {}, {}, {}\n", s.events, plural(s.allocations, "allocation", "allocations"),
                 plural(s.frees, "free", "frees"), plural(s.failures, "failure", "failures"));
  if (s.events > 0) fmt::format_to(out, "  span           {}\n", human_duration(s.last_time_ns - s.first_time_ns));
  fmt::format_to(out, "  allocated      {} in total, {} freed\n", human_bytes(s.bytes_allocated),
                 human_bytes(s.bytes_freed));
  if (s.peak_live_at) {
    fmt::format_to(out, "  peak live      {} at {}, event #{}, line {}\n", bytes_exact(s.peak_live_bytes),
                   describe_when(*s.peak_live_at, s.first_time_ns), s.peak_live_at->event_index, s.peak_live_at->line);
  } else {
    fmt::format_to(out, "  peak live      0 B\n");
  }
  if (s.peak_reserved_bytes) {
    fmt::format_to(out, "  peak reserved  {} at {}, line {}\n", bytes_exact(*s.peak_reserved_bytes),
                   describe_when(*s.peak_reserved_at, s.first_time_ns), s.peak_reserved_at->line);
  } else {
    fmt::format_to(out, "  peak reserved  not in log\n");
  }
  apart_line(out, "pinned host", s.host);
  apart_line(out, "managed", s.managed);
  fmt::format_to(out, "  live at end    {} in {} {}\n", bytes_exact(s.live_at_end_bytes),
                 plural(s.live_at_end_count, "allocation", "allocations"), live_at_end_title(s));
  fmt::format_to(out, "  unknown frees  {}\n", s.unknown_free_count);
  if (s.columns.duration) {
    // Calls served from the free lists have no DurationNs: this is the time the
    // program spent in gpumem's slow paths and the driver calls behind them.
    fmt::format_to(out, "  time in calls  {} in the {} timed (driver calls, the pool's slow path)\n",
                   logged_duration(s.timed_ns), plural(s.timed_calls, "call", "calls"));
  }
  if (s.reused_live_pointers > 0) {
    fmt::format_to(out, "  reused live pointers {} (allocate of a pointer already live)\n", s.reused_live_pointers);
  }
  if (s.ended_abruptly) {
    fmt::format_to(out,
                   "  note           the log ends in NUL padding or a torn row: its writer did not close it\n"
                   "                 (killed, crashed, or still running)\n");
  }

  if (!s.live_at_end.empty()) {
    fmt::format_to(out, "\n  {} ({}, largest first):\n", live_at_end_title(s), s.live_at_end_count);
    allocation_table(out, s, s.live_at_end, s.live_at_end_count);
  }
  if (!s.largest.empty()) {
    fmt::format_to(out, "\n  largest allocations (top {}):\n", s.largest.size());
    allocation_table(out, s, s.largest, s.largest.size());
  }
  if (!s.slowest.empty()) {
    fmt::format_to(out, "\n  slowest calls (top {}):\n", s.slowest.size());
    fmt::format_to(out, "    {:>10}  {:>12}  {:<16} {:<28} {:>8} {:<14} {:>8}\n", "duration", "size", "action", "time",
                   "thread", "entry", "line");
    for (auto const& t : s.slowest) {
      fmt::format_to(out, "    {:>10}  {:>12}  {:<16} {:<28} {:>8} {:<14} {:>8}\n", logged_duration(t.duration_ns),
                     human_bytes(t.call.size), action_name(t.action), describe_when(t.call.at, s.first_time_ns),
                     t.call.thread, or_dash(s.string(t.call.entry)), t.call.at.line);
    }
    more(out, s.timed_calls, s.slowest.size());
  }
  if (!s.failed.empty()) {
    fmt::format_to(out, "\n  failed allocations ({}):\n", s.failures);
    fmt::format_to(out, "    {:>12}  {:<28} {:>8} {:>8} {:<14} {:<28} {:>8}\n", "size", "time", "thread", "stream",
                   "entry", "result", "line");
    for (auto const& f : s.failed) {
      fmt::format_to(out, "    {:>12}  {:<28} {:>8} {:>8} {:<14} {:<28} {:>8}\n", human_bytes(f.size),
                     describe_when(f.at, s.first_time_ns), f.thread, hex(f.stream), or_dash(s.string(f.entry)),
                     f.result ? escape_text(s.string(f.result)) : "(not in log)", f.at.line);
    }
    more(out, s.failures, s.failed.size());
  }
  if (!s.unknown_frees.empty()) {
    fmt::format_to(out, "\n  frees of unknown pointers ({}):\n", s.unknown_free_count);
    fmt::format_to(out, "    {:<18} {:>12}  {:<28} {:>8} {:>8} {:>8}\n", "pointer", "size", "time", "thread", "stream",
                   "line");
    for (auto const& u : s.unknown_frees) {
      fmt::format_to(out, "    {:<18} {:>12}  {:<28} {:>8} {:>8} {:>8}\n", hex(u.pointer), human_bytes(u.size),
                     describe_when(u.at, s.first_time_ns), u.thread, hex(u.stream), u.at.line);
    }
    more(out, s.unknown_free_count, s.unknown_frees.size());
  }
  if (!s.histogram.empty()) {
    fmt::format_to(out, "\n  size histogram (successful allocations):\n");
    fmt::format_to(out, "    {:<24} {:>10} {:>12}\n", "size", "count", "bytes");
    for (auto const& b : s.histogram) {
      fmt::format_to(out, "    {:<24} {:>10} {:>12}\n", size_range_label(b.lo, b.hi), b.count, human_bytes(b.bytes));
    }
  }
  if (sites != nullptr) call_sites(out, s, *sites);
  keyed(out, "per thread", s.threads, false, "thread");
  keyed(out, "per stream", s.streams, true, "stream");
  if (s.columns.device) keyed(out, "per device", s.devices, false, "device");
  if (s.warning_count > 0) {
    fmt::format_to(out, "\n  {} (see stderr)\n", plural(s.warning_count, "warning", "warnings"));
  }
  fmt::format_to(out, "\n");
}

void call_sites(out_it out, log_summary const& s, call_site_report const& c) {
  fmt::format_to(out, "\n  call sites: {}\n", escape_text(stack_table_note(c)));
  for (site_list const& list : site_lists(s, c)) {
    if (list.sites->empty()) continue;
    fmt::format_to(out, "\n  {}, {} ({} {}):\n", list.title, list.ranked_by, list.total,
                   list.total == 1 ? "call site" : "call sites");
    for (auto const& site : *list.sites) {
      std::uint64_t const n = list.count(site.stats);
      fmt::format_to(out, "    {} in {} {} (stack {:x})\n", human_bytes(list.bytes(site.stats)), n,
                     n == 1 ? list.counted.substr(0, list.counted.size() - 1) : list.counted, site.stats.stack);
      if (!site.recorded) fmt::format_to(out, "      (not in the stack table)\n");
      fmt::format_to(out, "{}", frame_lines(site.frames, "      "));
    }
    more(out, list.total, list.sites->size());
  }
  if (auto const note = unattributed_note(s, c); !note.empty()) fmt::format_to(out, "\n  {}\n", note);
}

void side_by_side(out_it out, report_data const& r) {
  auto const& c = *r.combined;
  std::vector<std::string> names;
  for (auto const& s : r.logs) names.push_back(escape_text(base_name(s.path)));
  std::size_t w = 12;
  for (auto const& n : names) w = std::max(w, n.size());
  fmt::format_to(out, "== {} logs side by side ==\n  {:<16}", r.logs.size(), "");
  for (auto const& n : names) fmt::format_to(out, " {:>{}}", n, w);
  fmt::format_to(out, " {:>{}}\n", "combined", w);
  for (auto const& row : comparison_rows(r)) {
    fmt::format_to(out, "  {:<16}", row.label);
    for (auto const& v : row.per_log) fmt::format_to(out, " {:>{}}", v, w);
    fmt::format_to(out, " {:>{}}\n", row.combined, w);
  }

  if (c.peak_live_bytes == 0) {
    fmt::format_to(out, "\n  combined peak live 0 B\n\n");
    return;
  }
  auto const& peak_log = r.logs[c.peak_log];
  std::int64_t start = peak_log.first_time_ns;
  for (auto const& s : r.logs) {
    if (s.events > 0) start = std::min(start, s.first_time_ns);
  }
  fmt::format_to(out, "\n  combined peak live {} at +{} on the merged timeline (reached by {} line {})\n\n",
                 bytes_exact(c.peak_live_bytes), human_duration(c.peak_at.time_ns - start), escape_text(peak_log.path),
                 c.peak_at.line);
}

}  // namespace

std::string text_report(report_data const& r) {
  std::string s;
  auto out = std::back_inserter(s);
  for (std::size_t i = 0; i < r.logs.size(); ++i) {
    one_log(out, r.logs[i], i < r.sites.size() && r.sites[i] ? &*r.sites[i] : nullptr);
  }
  for (auto const& snap : r.snapshots) s += snap.text;
  if (r.combined) side_by_side(out, r);
  for (auto const& u : r.unreadable) fmt::format_to(out, "not read: {}\n", escape_text(u.text()));
  return s;
}

}  // namespace gpumem::tools
