// One self-contained HTML page: inline CSS, inline SVG (timeline + histogram),
// tables for the summary, leaks, failures and unknown frees. No scripts, no
// external resources, so it opens anywhere (mail attachment, CI artefact).
#include "report.hpp"

#include "timeline_plot.hpp"
#include "units.hpp"

#include "text_escape.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <iterator>

namespace gpumem::tools {

namespace {

using out_it = std::back_insert_iterator<std::string>;

constexpr int svg_width = 960;
constexpr int svg_height = 420;

std::string css(rgb c) { return fmt::format("rgb({},{},{})", c.r, c.g, c.b); }

std::string plural(std::uint64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

/// A sentence's start: "never freed" -> "Never freed".
std::string capitalized(std::string_view s) {
  std::string out{s};
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

void timeline_svg(out_it out, std::vector<log_summary const*> const& logs, combined_summary const* combined) {
  plot_layout const probe{{}, svg_width, svg_height};
  auto const series = timeline_series(logs, combined, probe.plot_right() - probe.plot_left());
  plot_layout const l{series, svg_width, svg_height};
  fmt::format_to(out,
                 R"~(<svg class="plot" id="timeline" xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" )~"
                 R"~(viewBox="0 0 {0} {1}" font-family="sans-serif" font-size="12">)~"
                 "\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
                 svg_width, svg_height);
  for (double v : l.yticks.values) {
    double const y = l.y(v);
    fmt::format_to(out,
                   R"~(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#e1e1e1"/>)~"
                   R"~(<text x="{}" y="{:.1f}" text-anchor="end">{}</text>)~"
                   "\n",
                   l.plot_left(), y, l.plot_right(), y, l.plot_left() - 6, y + 4, l.y_tick_label(v));
  }
  for (double v : l.xticks.values) {
    double const x = l.x(l.t0 + static_cast<std::int64_t>(v));
    fmt::format_to(out,
                   R"~(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#e1e1e1"/>)~"
                   R"~(<text x="{:.1f}" y="{}" text-anchor="middle">{}</text>)~"
                   "\n",
                   x, l.plot_top(), x, l.plot_bottom(), x, l.plot_bottom() + 18, l.x_tick_label(v));
  }
  fmt::format_to(out,
                 R"~(<path d="M{0} {1}V{2}H{3}" fill="none" stroke="#282828"/>)~"
                 R"~(<text x="{4}" y="{5}" text-anchor="middle">{6}</text>)~"
                 R"~(<text transform="translate(18 {7}) rotate(-90)" text-anchor="middle">{8}</text>)~"
                 "\n",
                 l.plot_left(), l.plot_top(), l.plot_bottom(), l.plot_right(), (l.plot_left() + l.plot_right()) / 2,
                 l.plot_bottom() + 38, escape_html(l.x_label()), (l.plot_top() + l.plot_bottom()) / 2,
                 escape_html(l.y_label()));
  for (auto const& s : series) {
    fmt::format_to(out, R"~(<polyline fill="none" stroke-width="2" stroke="{}" points=")~", css(s.color));
    for (auto const& [x, y] : l.path(s)) fmt::format_to(out, "{:.1f},{:.1f} ", x, y);
    fmt::format_to(out, "\"><title>{}</title></polyline>\n", escape_html(s.label));
  }
  int y = l.plot_top() + 12;
  for (auto const& s : series) {
    fmt::format_to(out,
                   R"~(<rect x="{}" y="{}" width="14" height="8" fill="{}"/><text x="{}" y="{}">{}</text>)~"
                   "\n",
                   l.plot_right() - 190, y - 8, css(s.color), l.plot_right() - 170, y, escape_html(s.label));
    y += 16;
  }
  fmt::format_to(out, "</svg>\n");
}

void histogram_svg(out_it out, log_summary const& s) {
  if (s.histogram.empty()) return;
  constexpr int w = 960, h = 260, left = 60, right = 20, top = 20, bottom = 60;
  std::uint64_t max_count = 1;
  for (auto const& b : s.histogram) max_count = std::max(max_count, b.count);
  auto const ticks = nice_ticks(static_cast<double>(max_count), 1.0, 4);
  double const ymax = ticks.values.back();
  double const slot = static_cast<double>(w - left - right) / static_cast<double>(s.histogram.size());
  fmt::format_to(out,
                 R"~(<svg class="plot histogram" xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" )~"
                 R"~(viewBox="0 0 {0} {1}" font-family="sans-serif" font-size="11">)~"
                 "\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
                 w, h);
  auto ypos = [&](double v) { return (h - bottom) - v / ymax * (h - bottom - top); };
  for (double v : ticks.values) {
    fmt::format_to(out,
                   R"~(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#e1e1e1"/><text x="{}" y="{:.1f}" )~"
                   R"~(text-anchor="end">{}</text>)~"
                   "\n",
                   left, ypos(v), w - right, ypos(v), left - 6, ypos(v) + 4, tick_label(v));
  }
  for (std::size_t i = 0; i < s.histogram.size(); ++i) {
    auto const& b = s.histogram[i];
    double const x = left + slot * static_cast<double>(i);
    double const top_y = ypos(static_cast<double>(b.count));
    std::string const range = b.hi == 0 ? "0 B" : human_bytes(b.lo);
    fmt::format_to(out,
                   R"~(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="rgb(31,119,180)">)~"
                   R"~(<title>{}: {} allocations, {}</title></rect>)~"
                   R"~(<text transform="translate({:.1f} {}) rotate(-45)" text-anchor="end">{}</text>)~"
                   "\n",
                   x + slot * 0.1, top_y, slot * 0.8, (h - bottom) - top_y, escape_html(size_range_label(b.lo, b.hi)),
                   b.count, escape_html(human_bytes(b.bytes)), x + slot * 0.5, h - bottom + 14, escape_html(range));
  }
  fmt::format_to(out,
                 R"~(<path d="M{0} {1}V{2}H{3}" fill="none" stroke="#282828"/>)~"
                 R"~(<text transform="translate(14 {4}) rotate(-90)" text-anchor="middle">allocations</text></svg>)~"
                 "\n",
                 left, top, h - bottom, w - right, (top + h - bottom) / 2);
}

void more(out_it out, std::uint64_t total, std::size_t shown) {
  if (total > shown) fmt::format_to(out, "<p>… {} more not shown (--top).</p>\n", total - shown);
}

/// "<table><tr><th>size</th>...</tr>": the column names are the report's own (not escaped).
void table_head(out_it out, std::initializer_list<std::string_view> columns, std::string_view css_class = {}) {
  fmt::format_to(out, "<table{}{}{}><tr>", css_class.empty() ? "" : " class=\"", css_class,
                 css_class.empty() ? "" : "\"");
  for (auto const c : columns) fmt::format_to(out, "<th>{}</th>", c);
  fmt::format_to(out, "</tr>\n");
}

/// One row: each cell as fmt prints it (escape text from the log first).
template <typename... Cells>
void table_row(out_it out, Cells const&... cells) {
  fmt::format_to(out, "<tr>");
  (fmt::format_to(out, "<td>{}</td>", cells), ...);
  fmt::format_to(out, "</tr>\n");
}

void allocation_rows(out_it out, log_summary const& s, std::vector<allocation_record> const& rows,
                     std::uint64_t total) {
  table_head(out, {"size", "bytes", "time", "thread", "stream", "entry", "pointer", "line"});
  for (auto const& r : rows) {
    table_row(out, human_bytes(r.size), r.size, escape_html(describe_when(r.at, s.first_time_ns)), r.thread,
              hex(r.stream), escape_html(s.string(r.entry)), hex(r.pointer), r.at.line);
  }
  fmt::format_to(out, "</table>\n");
  more(out, total, rows.size());
}

void keyed(out_it out, char const* title, key_table const& t, bool hex_key, std::string_view key_name) {
  fmt::format_to(out, "<h3>{}</h3>\n", title);
  table_head(out, {key_name, "allocations", "frees", "failures", "allocated"});
  auto row = [&](std::string const& key, key_counts const& k) {
    table_row(out, key, k.allocations, k.frees, k.failures, human_bytes(k.bytes_allocated));
  };
  for (auto const& k : t.rows) row(hex_key ? hex(k.key) : fmt::format("{}", k.key), k);
  if (t.truncated) row("(others)", t.others);
  fmt::format_to(out, "</table>\n");
}

void frames_cell(out_it out, named_site const& site) {
  if (!site.recorded) {
    fmt::format_to(out, "<i>not in the stack table</i>");
    return;
  }
  fmt::format_to(out, "<ol class=\"frames\" start=\"0\">");
  for (auto const& f : site.frames) {
    fmt::format_to(out, "<li{}>{}</li>", f.what == symbol::kind::python ? " class=\"py\"" : "", escape_html(f.text()));
  }
  fmt::format_to(out, "</ol>");
}

void call_sites(out_it out, log_summary const& s, call_site_report const& c) {
  fmt::format_to(out, "<h3>Call sites</h3>\n<p>{}.</p>\n", escape_html(capitalized(stack_table_note(c))));
  for (site_list const& list : site_lists(s, c)) {
    if (list.sites->empty()) continue;
    fmt::format_to(out, "<h4>{} ({} call site{})</h4>\n", escape_html(capitalized(list.title)), list.total,
                   list.total == 1 ? "" : "s");
    table_head(out, {"bytes", list.counted, "stack", "frames (innermost first)"}, "sites");
    for (auto const& site : *list.sites) {
      fmt::format_to(out, "<tr><td>{}</td><td>{}</td><td>{:x}</td><td class=\"frames\">",
                     human_bytes(list.bytes(site.stats)), list.count(site.stats), site.stats.stack);
      frames_cell(out, site);
      fmt::format_to(out, "</td></tr>\n");
    }
    fmt::format_to(out, "</table>\n");
    more(out, list.total, list.sites->size());
  }
  if (auto const note = unattributed_note(s, c); !note.empty()) {
    fmt::format_to(out, "<p>{}.</p>\n", escape_html(capitalized(note)));
  }
}

void one_log(out_it out, log_summary const& s, call_site_report const* sites) {
  fmt::format_to(out, "<section><h2>{}</h2>\n", escape_html(s.path));
  if (!s.complete()) {
    fmt::format_to(out,
                   "<p class=\"incomplete\"><b>Incomplete log:</b> {} (marker at line {}). Allocations still live "
                   "at its end may have been freed in the lost rows: none is called a leak.</p>\n",
                   escape_html(incomplete_reason(*s.incomplete)), s.incomplete->line);
  }
  fmt::format_to(out, "<table class=\"summary\">\n");
  auto row = [&](std::string_view k, std::string const& v) {
    fmt::format_to(out, "<tr><th>{}</th><td>{}</td></tr>\n", k, escape_html(v));
  };
  row("format", fmt::format("{} log, {} columns, {} lines", s.dialect(), s.columns.count, s.lines));
  row("events", fmt::format("{}: {}, {}, {}", s.events, plural(s.allocations, "allocation", "allocations"),
                            plural(s.frees, "free", "frees"), plural(s.failures, "failure", "failures")));
  row("span", human_duration(s.last_time_ns - s.first_time_ns));
  row("peak live", s.peak_live_at ? fmt::format("{} ({} B) at {}, event #{}, line {}", human_bytes(s.peak_live_bytes),
                                                s.peak_live_bytes, describe_when(*s.peak_live_at, s.first_time_ns),
                                                s.peak_live_at->event_index, s.peak_live_at->line)
                                  : std::string{"0 B"});
  row("peak reserved",
      s.peak_reserved_bytes
          ? fmt::format("{} ({} B) at {}, line {}", human_bytes(*s.peak_reserved_bytes), *s.peak_reserved_bytes,
                        describe_when(*s.peak_reserved_at, s.first_time_ns), s.peak_reserved_at->line)
          : std::string{"not in log"});
  // Memory kinds kept apart from every device figure: rows of their own.
  auto apart_row = [&](std::string_view k, apart_memory_summary const& m) {
    if (!m.any()) return;
    row(k, fmt::format("{} ({}), {}, {}; peak live {}, live at end {} in {}",
                       plural(m.allocations, "allocation", "allocations"), human_bytes(m.bytes_allocated),
                       plural(m.frees, "free", "frees"), plural(m.failures, "failure", "failures"),
                       human_bytes(m.peak_live_bytes), human_bytes(m.live_at_end_bytes),
                       plural(m.live_at_end_count, "allocation", "allocations")));
  };
  if (s.columns.duration) {
    std::string v = fmt::format("{} in the {} timed (driver calls, the pool's slow path)", logged_duration(s.timed_ns),
                                plural(s.timed_calls, "call", "calls"));
    if (!s.slowest.empty()) {
      timed_call const& t = s.slowest.front();
      v += fmt::format("; the slowest {}, {} {} of {} at line {}", logged_duration(t.duration_ns),
                       s.string(t.call.entry), action_name(t.action), human_bytes(t.call.size), t.call.at.line);
    }
    row("time in calls", v);
  }
  apart_row("pinned host memory", s.host);
  apart_row("managed memory", s.managed);
  row("live at end", fmt::format("{} in {} {}", human_bytes(s.live_at_end_bytes),
                                 plural(s.live_at_end_count, "allocation", "allocations"), live_at_end_title(s)));
  row("frees of unknown pointers", fmt::format("{}", s.unknown_free_count));
  row("warnings", fmt::format("{}", s.warning_count));
  if (s.ended_abruptly) {
    row("note",
        "the log ends in NUL padding or a torn row: its writer did not close it (killed, crashed, or still "
        "running)");
  }
  fmt::format_to(out, "</table>\n");

  fmt::format_to(out, "<h3>{} ({})</h3>\n", escape_html(capitalized(live_at_end_title(s))), s.live_at_end_count);
  if (!s.live_at_end.empty()) allocation_rows(out, s, s.live_at_end, s.live_at_end_count);
  if (!s.failed.empty()) {
    fmt::format_to(out, "<h3>Failed allocations ({})</h3>\n", s.failures);
    table_head(out, {"size", "bytes", "time", "thread", "stream", "entry", "result", "line"});
    for (auto const& f : s.failed) {
      table_row(out, human_bytes(f.size), f.size, escape_html(describe_when(f.at, s.first_time_ns)), f.thread,
                hex(f.stream), escape_html(s.string(f.entry)),
                f.result ? escape_html(s.string(f.result)) : "(not in log)", f.at.line);
    }
    fmt::format_to(out, "</table>\n");
    more(out, s.failures, s.failed.size());
  }
  if (!s.unknown_frees.empty()) {
    fmt::format_to(out, "<h3>Frees of unknown pointers ({})</h3>\n", s.unknown_free_count);
    table_head(out, {"pointer", "size", "time", "thread", "stream", "line"});
    for (auto const& u : s.unknown_frees) {
      table_row(out, hex(u.pointer), human_bytes(u.size), escape_html(describe_when(u.at, s.first_time_ns)), u.thread,
                hex(u.stream), u.at.line);
    }
    fmt::format_to(out, "</table>\n");
    more(out, s.unknown_free_count, s.unknown_frees.size());
  }
  if (sites != nullptr) call_sites(out, s, *sites);
  fmt::format_to(out, "<h3>Largest allocations</h3>\n");
  allocation_rows(out, s, s.largest, s.largest.size());
  fmt::format_to(out, "<h3>Size histogram</h3>\n");
  histogram_svg(out, s);
  table_head(out, {"sizes", "count", "bytes"});
  for (auto const& b : s.histogram) {
    table_row(out, escape_html(size_range_label(b.lo, b.hi, " – ")), b.count, human_bytes(b.bytes));
  }
  fmt::format_to(out, "</table>\n");
  keyed(out, "Per thread", s.threads, false, "thread");
  keyed(out, "Per stream", s.streams, true, "stream");
  if (s.columns.device) keyed(out, "Per device", s.devices, false, "device");
  if (!s.warnings.empty()) {
    fmt::format_to(out, "<h3>Warnings ({})</h3>\n<ul class=\"warnings\">\n", s.warning_count);
    for (auto const& w : s.warnings) fmt::format_to(out, "<li>{}</li>\n", escape_html(w.text()));
    fmt::format_to(out, "</ul>\n");
  }
  fmt::format_to(out, "</section>\n");
}

}  // namespace

std::string html_report(report_data const& r) {
  std::string page;
  auto out = std::back_inserter(page);
  fmt::format_to(out,
                 "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                 "<title>gpumem report</title>\n<style>\n"
                 "body{{font-family:sans-serif;margin:2em;color:#282828;max-width:1000px}}\n"
                 "table{{border-collapse:collapse;margin:.5em 0}}\n"
                 "th,td{{border:1px solid #ccc;padding:2px 8px;text-align:right;font-size:13px}}\n"
                 "table.summary th{{text-align:left;background:#f4f4f4}}\ntable.summary td{{text-align:left}}\n"
                 "section{{border-top:2px solid #1f77b4;margin-top:2em}}\n"
                 ".warnings{{color:#a00;font-family:monospace}}\nsvg.plot{{border:1px solid #ddd}}\n"
                 ".incomplete{{background:#fde8e8;border:2px solid #a00;padding:.5em 1em}}\n"
                 "td.frames{{text-align:left;font-family:monospace;font-size:12px}}\n"
                 "ol.frames{{margin:0;padding-left:2.5em}}\nli.py{{color:#1f5fa0;font-weight:bold}}\n"
                 "</style></head><body>\n<h1>gpumem allocation report</h1>\n");
  for (auto const& s : r.logs) {
    if (!s.complete()) {
      fmt::format_to(out,
                     "<p class=\"incomplete\"><b>{} is incomplete:</b> {}. No allocation in it is called a "
                     "leak.</p>\n",
                     escape_html(s.path), escape_html(incomplete_reason(*s.incomplete)));
    }
  }
  std::vector<log_summary const*> logs;
  for (auto const& s : r.logs) logs.push_back(&s);
  fmt::format_to(out, "<h2>Device memory over time</h2>\n");
  timeline_svg(out, logs, r.combined ? &*r.combined : nullptr);
  if (r.combined) {
    fmt::format_to(out, "<h2>All {} logs</h2>\n<table class=\"summary\"><tr><th></th>", r.logs.size());
    for (auto const& s : r.logs) fmt::format_to(out, "<th>{}</th>", escape_html(s.path));
    fmt::format_to(out, "<th>combined</th></tr>\n");
    for (auto const& row : comparison_rows(r)) {
      fmt::format_to(out, "<tr><th>{}</th>", escape_html(row.label));
      for (auto const& v : row.per_log) fmt::format_to(out, "<td>{}</td>", escape_html(v));
      fmt::format_to(out, "<td>{}</td></tr>\n", escape_html(row.combined));
    }
    fmt::format_to(out, "</table>\n");
  }
  for (std::size_t i = 0; i < r.logs.size(); ++i) {
    one_log(out, r.logs[i], i < r.sites.size() && r.sites[i] ? &*r.sites[i] : nullptr);
  }
  for (auto const& snap : r.snapshots) {
    fmt::format_to(out, "<section><h2>Out of memory: {}</h2>\n<pre>{}</pre></section>\n", escape_html(snap.path),
                   escape_html(snap.text));
  }
  if (!r.unreadable.empty()) {
    fmt::format_to(out, "<h2>Not read</h2>\n<ul class=\"warnings\">\n");
    for (auto const& u : r.unreadable) fmt::format_to(out, "<li>{}</li>\n", escape_html(u.text()));
    fmt::format_to(out, "</ul>\n");
  }
  fmt::format_to(out, "</body></html>\n");
  return page;
}

}  // namespace gpumem::tools
