// Terminal rendering: one block per log, then (several logs) a side-by-side table
// and the totals of the merged timeline.
#include "report.hpp"

#include "units.hpp"

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

std::string_view or_dash(std::string_view s) { return s.empty() ? std::string_view{"-"} : s; }

void allocation_table(out_it out, analysed_log const& a, std::vector<allocation_record> const& rows,
                      std::size_t limit) {
  fmt::format_to(out, "    {:>12}  {:<28} {:>8} {:>8} {:<14} {:<18} {:>8}\n", "size", "time", "thread", "stream",
                 "entry", "pointer", "line");
  for (std::size_t i = 0; i < std::min(limit, rows.size()); ++i) {
    auto const& r = rows[i];
    fmt::format_to(out, "    {:>12}  {:<28} {:>8} {:>8} {:<14} {:<18} {:>8}\n", human_bytes(r.size),
                   describe_when(r.at, a.summary.first_time_ns), r.thread, hex(r.stream),
                   or_dash(a.log.string(r.entry)), hex(r.pointer), r.at.line);
  }
  if (rows.size() > limit) fmt::format_to(out, "    ... {} more\n", rows.size() - limit);
}

void one_log(out_it out, analysed_log const& a, std::size_t top_n) {
  auto const& s = a.summary;
  auto const& log = a.log;
  fmt::format_to(out, "== {} ({} log, {} columns) ==\n", s.path, s.dialect, log.columns.count);
  fmt::format_to(out, "  events         {}: {}, {}, {}\n", s.events, plural(s.allocations, "allocation", "allocations"),
                 plural(s.frees, "free", "frees"), plural(s.failures, "failure", "failures"));
  if (s.events > 0) fmt::format_to(out, "  span           {}\n", human_duration(s.last_time_ns - s.first_time_ns));
  fmt::format_to(out, "  allocated      {} in total, {} freed\n", human_bytes(s.bytes_allocated),
                 human_bytes(s.bytes_freed));
  if (s.peak_live_at) {
    fmt::format_to(out, "  peak live      {} at {}, event #{}, line {}\n", bytes_exact(s.peak_live_bytes),
                   describe_when(*s.peak_live_at, s.first_time_ns), s.peak_live_at->event_index,
                   s.peak_live_at->line);
  } else {
    fmt::format_to(out, "  peak live      0 B\n");
  }
  if (s.peak_reserved_bytes) {
    fmt::format_to(out, "  peak reserved  {} at {}, line {}\n", bytes_exact(*s.peak_reserved_bytes),
                   describe_when(*s.peak_reserved_at, s.first_time_ns), s.peak_reserved_at->line);
  } else {
    fmt::format_to(out, "  peak reserved  not in log\n");
  }
  fmt::format_to(out, "  live at end    {} in {} never freed\n", bytes_exact(s.live_at_end_bytes),
                 plural(s.leaks.size(), "allocation", "allocations"));
  fmt::format_to(out, "  unknown frees  {}\n", s.unknown_frees.size());
  if (s.reused_live_pointers > 0) {
    fmt::format_to(out, "  reused live pointers {} (allocate of a pointer already live)\n", s.reused_live_pointers);
  }

  if (!s.leaks.empty()) {
    fmt::format_to(out, "\n  never freed ({}, largest first):\n", s.leaks.size());
    allocation_table(out, a, s.leaks, top_n);
  }
  if (!s.largest.empty()) {
    fmt::format_to(out, "\n  largest allocations (top {}):\n", s.largest.size());
    allocation_table(out, a, s.largest, top_n);
  }
  if (!s.failed.empty()) {
    fmt::format_to(out, "\n  failed allocations ({}):\n", s.failed.size());
    fmt::format_to(out, "    {:>12}  {:<28} {:>8} {:>8} {:<14} {:<28} {:>8}\n", "size", "time", "thread", "stream",
                   "entry", "result", "line");
    for (std::size_t i = 0; i < std::min(top_n, s.failed.size()); ++i) {
      auto const& f = s.failed[i];
      fmt::format_to(out, "    {:>12}  {:<28} {:>8} {:>8} {:<14} {:<28} {:>8}\n", human_bytes(f.size),
                     describe_when(f.at, s.first_time_ns), f.thread, hex(f.stream), or_dash(log.string(f.entry)),
                     f.result ? log.string(f.result) : "(not in log)", f.at.line);
    }
    if (s.failed.size() > top_n) fmt::format_to(out, "    ... {} more\n", s.failed.size() - top_n);
  }
  if (!s.unknown_frees.empty()) {
    fmt::format_to(out, "\n  frees of unknown pointers ({}):\n", s.unknown_frees.size());
    fmt::format_to(out, "    {:<18} {:>12}  {:<28} {:>8} {:>8} {:>8}\n", "pointer", "size", "time", "thread",
                   "stream", "line");
    for (std::size_t i = 0; i < std::min(top_n, s.unknown_frees.size()); ++i) {
      auto const& u = s.unknown_frees[i];
      fmt::format_to(out, "    {:<18} {:>12}  {:<28} {:>8} {:>8} {:>8}\n", hex(u.pointer), human_bytes(u.size),
                     describe_when(u.at, s.first_time_ns), u.thread, hex(u.stream), u.at.line);
    }
    if (s.unknown_frees.size() > top_n) fmt::format_to(out, "    ... {} more\n", s.unknown_frees.size() - top_n);
  }
  if (!s.histogram.empty()) {
    fmt::format_to(out, "\n  size histogram (successful allocations):\n");
    fmt::format_to(out, "    {:<24} {:>10} {:>12}\n", "size", "count", "bytes");
    for (auto const& b : s.histogram) {
      std::string const range = b.hi == 0 ? "0 B" : fmt::format("{} - <{}", human_bytes(b.lo), human_bytes(b.hi + 1));
      fmt::format_to(out, "    {:<24} {:>10} {:>12}\n", range, b.count, human_bytes(b.bytes));
    }
  }
  auto keyed = [&](char const* title, std::vector<key_counts> const& rows, bool hex_key, char const* key_name) {
    fmt::format_to(out, "\n  {} ({}):\n", title, rows.size());
    fmt::format_to(out, "    {:>18} {:>10} {:>10} {:>9} {:>12}\n", key_name, "allocs", "frees", "failures", "bytes");
    for (auto const& k : rows) {
      fmt::format_to(out, "    {:>18} {:>10} {:>10} {:>9} {:>12}\n", hex_key ? hex(k.key) : fmt::format("{}", k.key),
                     k.allocations, k.frees, k.failures, human_bytes(k.bytes_allocated));
    }
  };
  keyed("per thread", s.threads, false, "thread");
  keyed("per stream", s.streams, true, "stream");
  if (!s.devices.empty()) keyed("per device", s.devices, false, "device");
  if (log.warning_count > 0) {
    fmt::format_to(out, "\n  {} (see stderr)\n", plural(log.warning_count, "warning", "warnings"));
  }
  fmt::format_to(out, "\n");
}

void side_by_side(out_it out, report_data const& r) {
  auto const& c = *r.combined;
  std::vector<std::string> names;
  for (auto const& a : r.logs) {
    std::string n = a.summary.path;
    if (auto slash = n.rfind('/'); slash != std::string::npos) n.erase(0, slash + 1);
    names.push_back(std::move(n));
  }
  std::size_t w = 12;
  for (auto const& n : names) w = std::max(w, n.size());
  auto row = [&](std::string_view label, auto&& value_of, std::string const& total) {
    fmt::format_to(out, "  {:<16}", label);
    for (auto const& a : r.logs) fmt::format_to(out, " {:>{}}", value_of(a.summary), w);
    fmt::format_to(out, " {:>{}}\n", total, w);
  };
  fmt::format_to(out, "== {} logs side by side ==\n  {:<16}", r.logs.size(), "");
  for (auto const& n : names) fmt::format_to(out, " {:>{}}", n, w);
  fmt::format_to(out, " {:>{}}\n", "combined", w);
  auto num = [](std::uint64_t v) { return fmt::format("{}", v); };
  row("events", [&](log_summary const& s) { return num(s.events); }, num(c.events));
  row("allocations", [&](log_summary const& s) { return num(s.allocations); }, num(c.allocations));
  row("frees", [&](log_summary const& s) { return num(s.frees); }, num(c.frees));
  row("failures", [&](log_summary const& s) { return num(s.failures); }, num(c.failures));
  row("allocated", [&](log_summary const& s) { return human_bytes(s.bytes_allocated); }, human_bytes(c.bytes_allocated));
  row("peak live", [&](log_summary const& s) { return human_bytes(s.peak_live_bytes); }, human_bytes(c.peak_live_bytes));
  row("peak reserved",
      [&](log_summary const& s) { return s.peak_reserved_bytes ? human_bytes(*s.peak_reserved_bytes) : "not in log"; },
      "");
  row("live at end", [&](log_summary const& s) { return human_bytes(s.live_at_end_bytes); },
      human_bytes(c.live_at_end_bytes));
  row("never freed", [&](log_summary const& s) { return num(s.leaks.size()); }, num(c.leaked_allocations));
  row("unknown frees", [&](log_summary const& s) { return num(s.unknown_frees.size()); }, "");

  if (c.peak_live_bytes == 0) {
    fmt::format_to(out, "\n  combined peak live 0 B\n\n");
    return;
  }
  auto const& peak_log = r.logs[c.peak_log].summary;
  std::int64_t start = peak_log.first_time_ns;
  for (auto const& a : r.logs) {
    if (a.summary.events > 0) start = std::min(start, a.summary.first_time_ns);
  }
  fmt::format_to(out, "\n  combined peak live {} at +{} on the merged timeline (reached by {} line {})\n\n",
                 bytes_exact(c.peak_live_bytes), human_duration(c.peak_time_ns - start), peak_log.path,
                 c.peak_at.line);
}

}  // namespace

std::string text_report(report_data const& r) {
  std::string s;
  auto out = std::back_inserter(s);
  for (auto const& a : r.logs) one_log(out, a, r.top_n);
  if (r.combined) side_by_side(out, r);
  for (auto const& u : r.unreadable) fmt::format_to(out, "not read: {}\n", u.text());
  return s;
}

}  // namespace gpumem::tools
