// JSON rendering for machines and tests: every number exact (bytes, ns, indices).
// Optional values are null when the log lacks the column. Lists are bounded by
// --top; the counts beside them are exact. Strings are escaped (json_string).
#include "report.hpp"

#include "text_escape.hpp"

#include <fmt/format.h>

#include <iterator>

namespace gpumem::tools {

namespace {

using out_it = std::back_insert_iterator<std::string>;

std::string position(log_position const& p) {
  return fmt::format(R"({{"event_index":{},"line":{},"time_ns":{},"time":{}}})", p.event_index, p.line, p.time_ns,
                     p.clock_us < 0 ? "null" : json_string(format_time_of_day(p.clock_us)));
}

std::string allocation(log_summary const& s, allocation_record const& a) {
  return fmt::format(R"({{"pointer":"{:#x}","size":{},"thread":{},"stream":{},"device":{},"entry":{},"at":{}}})",
                     a.pointer, a.size, a.thread, a.stream, a.device, json_string(s.string(a.entry)), position(a.at));
}

template <typename Range, typename Fn>
void array(out_it out, Range const& rows, Fn&& item) {
  fmt::format_to(out, "[");
  bool first = true;
  for (auto const& r : rows) {
    fmt::format_to(out, "{}{}", first ? "" : ",", item(r));
    first = false;
  }
  fmt::format_to(out, "]");
}

std::string keyed(key_counts const& k) {
  return fmt::format(R"({{"id":{},"allocations":{},"frees":{},"failures":{},"bytes_allocated":{}}})", k.key,
                     k.allocations, k.frees, k.failures, k.bytes_allocated);
}

void key_list(out_it out, std::string_view name, key_table const& t) {
  fmt::format_to(out, R"(,"{}":)", name);
  array(out, t.rows, keyed);
  fmt::format_to(out, R"(,"{}_others":{})", name,
                 t.truncated
                     ? fmt::format(R"({{"allocations":{},"frees":{},"failures":{},"bytes_allocated":{}}})",
                                   t.others.allocations, t.others.frees, t.others.failures, t.others.bytes_allocated)
                     : "null");
}

std::string frames_json(std::vector<symbol> const& frames) {
  std::string o = "[";
  for (std::size_t i = 0; i < frames.size(); ++i) o += (i ? "," : "") + frame_json(frames[i]);
  return o + "]";
}

std::string site_json(named_site const& site) {
  auto const& c = site.stats;
  std::string const frames = frames_json(site.frames);
  return fmt::format(R"({{"stack":"{:x}","recorded":{},"allocations":{},"bytes_allocated":{},"live_at_end_bytes":{},)"
                     R"("live_at_end_count":{},"live_at_peak_bytes":{},"live_at_peak_count":{},"failures":{},)"
                     R"("failed_bytes":{},"frames":{}}})",
                     c.stack, site.recorded, c.allocations, c.bytes_allocated, c.live_at_end_bytes, c.live_at_end_count,
                     c.live_at_peak_bytes, c.live_at_peak_count, c.failures, c.failed_bytes, frames);
}

void call_sites(out_it out, log_summary const& s, call_site_report const* c) {
  fmt::format_to(out, R"(,"call_sites":)");
  if (c == nullptr) {
    fmt::format_to(out, "null");
    return;
  }
  fmt::format_to(out, R"({{"stack_table":{},"table_present":{},"stacks_in_table":{},"perf_map_used":{},)",
                 json_string(c->table_path), c->table_present, c->stacks_in_table, c->perf_map_used);
  fmt::format_to(out, R"("leak_sites":{},"peak_sites":{},"failure_sites":{})", c->leak_sites, c->peak_sites,
                 c->failure_sites);
  for (site_list const& list : site_lists(s, *c)) {
    fmt::format_to(out, R"(,"{}":)", list.key);
    array(out, *list.sites, site_json);
  }
  auto const& u = c->unattributed;
  fmt::format_to(out,
                 R"(,"unattributed":{{"allocations":{},"live_at_end_bytes":{},"live_at_peak_bytes":{},"failures":{}}})",
                 u.allocations, u.live_at_end_bytes, u.live_at_peak_bytes, u.failures);
  fmt::format_to(out, R"(,"warnings":)");
  array(out, c->warnings, [](log_diagnostic const& d) { return json_string(d.text()); });
  fmt::format_to(out, "}}");
}

void apart_memory(out_it out, std::string_view name, apart_memory_summary const& m) {
  fmt::format_to(out,
                 R"(,"{}":{{"allocations":{},"frees":{},"failures":{},"bytes_allocated":{},"peak_live_bytes":{},)"
                 R"("peak_live_at":{},"live_at_end_bytes":{},"live_at_end_count":{}}})",
                 name, m.allocations, m.frees, m.failures, m.bytes_allocated, m.peak_live_bytes,
                 m.peak_live_at ? position(*m.peak_live_at) : "null", m.live_at_end_bytes, m.live_at_end_count);
}

void one_log(out_it out, log_summary const& s, call_site_report const* sites) {
  fmt::format_to(out, R"({{"path":{},"dialect":"{}","columns":{},"lines":{},)", json_string(s.path), s.dialect(),
                 s.columns.count, s.lines);
  fmt::format_to(out, R"("complete":{},"incomplete":)", s.complete());
  if (s.incomplete) {
    fmt::format_to(out, R"({{"dropped_rows":{},"reason":{},"line":{}}},)",
                   s.incomplete->dropped_rows ? fmt::format("{}", *s.incomplete->dropped_rows) : "null",
                   json_string(s.incomplete->reason), s.incomplete->line);
  } else {
    fmt::format_to(out, "null,");
  }
  fmt::format_to(out, R"("ended_abruptly":{},)", s.ended_abruptly);
  fmt::format_to(out, R"("events":{},"allocations":{},"frees":{},"failures":{},"bytes_allocated":{},"bytes_freed":{},)",
                 s.events, s.allocations, s.frees, s.failures, s.bytes_allocated, s.bytes_freed);
  fmt::format_to(out, R"("first_time_ns":{},"last_time_ns":{},)", s.first_time_ns, s.last_time_ns);
  fmt::format_to(out, R"("peak_live_bytes":{},"peak_live_at":{},)", s.peak_live_bytes,
                 s.peak_live_at ? position(*s.peak_live_at) : "null");
  if (s.peak_reserved_bytes) {
    fmt::format_to(out, R"("peak_reserved_bytes":{},"peak_reserved_at":{},)", *s.peak_reserved_bytes,
                   position(*s.peak_reserved_at));
  } else {
    fmt::format_to(out, R"("peak_reserved_bytes":null,"peak_reserved_at":null,)");
  }
  fmt::format_to(out, R"("live_at_end_bytes":{},"live_at_end_count":{},"reused_live_pointers":{},"live_at_end":)",
                 s.live_at_end_bytes, s.live_at_end_count, s.reused_live_pointers);
  auto const alloc = [&](allocation_record const& r) { return allocation(s, r); };
  array(out, s.live_at_end, alloc);
  // Leaks only where the log is complete: otherwise a free may be among the lost rows.
  fmt::format_to(out, R"(,"leaks":)");
  if (s.complete()) {
    array(out, s.live_at_end, alloc);
  } else {
    fmt::format_to(out, "null");
  }
  fmt::format_to(out, R"(,"largest":)");
  array(out, s.largest, alloc);
  fmt::format_to(out, R"(,"failed":)");
  array(out, s.failed, [&](failure_record const& f) {
    return fmt::format(R"({{"size":{},"thread":{},"stream":{},"entry":{},"result":{},"at":{}}})", f.size, f.thread,
                       f.stream, json_string(s.string(f.entry)), f.result ? json_string(s.string(f.result)) : "null",
                       position(f.at));
  });
  // Without a DurationNs column nothing was timed: null, not 0.
  if (s.columns.duration) {
    fmt::format_to(out, R"(,"timed_calls":{},"timed_ns":{},"slowest":)", s.timed_calls, s.timed_ns);
    array(out, s.slowest, [&](timed_call const& t) {
      return fmt::format(R"({{"duration_ns":{},"action":"{}","size":{},"thread":{},"entry":{},"at":{}}})",
                         t.duration_ns, action_name(t.action), t.call.size, t.call.thread,
                         json_string(s.string(t.call.entry)), position(t.call.at));
    });
  } else {
    fmt::format_to(out, R"(,"timed_calls":null,"timed_ns":null,"slowest":null)");
  }
  fmt::format_to(out, R"(,"unknown_free_count":{},"unknown_frees":)", s.unknown_free_count);
  array(out, s.unknown_frees, [](unknown_free_record const& u) {
    return fmt::format(R"({{"pointer":"{:#x}","size":{},"thread":{},"stream":{},"at":{}}})", u.pointer, u.size,
                       u.thread, u.stream, position(u.at));
  });
  fmt::format_to(out, R"(,"histogram":)");
  array(out, s.histogram, [](histogram_bucket const& b) {
    return fmt::format(R"({{"min":{},"max":{},"count":{},"bytes":{}}})", b.lo, b.hi, b.count, b.bytes);
  });
  key_list(out, "threads", s.threads);
  key_list(out, "streams", s.streams);
  key_list(out, "devices", s.devices);
  fmt::format_to(out, R"(,"warning_count":{},"warnings":)", s.warning_count);
  array(out, s.warnings, [](log_diagnostic const& d) { return json_string(d.text()); });
  // [time_ns, live bytes, reserved bytes or null], bounded (see timeline_builder).
  fmt::format_to(out, R"(,"timeline":)");
  array(out, s.timeline, [](timeline_point const& p) {
    return p.reserved < 0 ? fmt::format("[{},{},null]", p.time_ns, p.live)
                          : fmt::format("[{},{},{}]", p.time_ns, p.live, p.reserved);
  });
  call_sites(out, s, sites);
  // Memory kinds kept apart from every device figure above.
  apart_memory(out, "pinned_host", s.host);
  apart_memory(out, "managed", s.managed);
  fmt::format_to(out, "}}");
}

}  // namespace

std::string frame_json(symbol const& f) {
  char const* kind = f.what == symbol::kind::python ? "python" : f.what == symbol::kind::native ? "native" : "unknown";
  return fmt::format(R"({{"address":"{:#x}","kind":"{}","function":{},"file":{},"line":{},"module":{},"offset":{}}})",
                     f.address, kind, f.function.empty() ? "null" : json_string(f.function),
                     f.file.empty() ? "null" : json_string(f.file), f.line,
                     f.module.empty() ? "null" : json_string(f.module),
                     f.module.empty() ? "null" : fmt::format("\"{:#x}\"", f.offset));
}

std::string json_report(report_data const& r) {
  std::string s;
  auto out = std::back_inserter(s);
  fmt::format_to(out, R"({{"logs":[)");
  for (std::size_t i = 0; i < r.logs.size(); ++i) {
    if (i) fmt::format_to(out, ",");
    one_log(out, r.logs[i], i < r.sites.size() && r.sites[i] ? &*r.sites[i] : nullptr);
  }
  // Each snapshot as the shim wrote it, and its frames named.
  fmt::format_to(out, R"(],"snapshots":[)");
  for (std::size_t i = 0; i < r.snapshots.size(); ++i) {
    auto const& snap = r.snapshots[i];
    std::string sites = "[";
    for (std::size_t k = 0; k < snap.site_frames.size(); ++k)
      sites += (k ? "," : "") + frames_json(snap.site_frames[k]);
    sites += "]";
    fmt::format_to(out, R"({}{{"path":{},"snapshot":{},"request_frames":{},"top_site_frames":{}}})", i ? "," : "",
                   json_string(snap.path), snap.raw, frames_json(snap.request_frames), sites);
  }
  fmt::format_to(out, R"(],"snapshot_errors":)");
  array(out, r.snapshot_errors, [](log_diagnostic const& d) { return json_string(d.text()); });
  fmt::format_to(out, R"(,"unreadable":)");
  array(out, r.unreadable, [](log_diagnostic const& d) { return json_string(d.text()); });
  if (r.combined) {
    auto const& c = *r.combined;
    fmt::format_to(
        out,
        R"(,"combined":{{"logs":{},"complete":{},"events":{},"allocations":{},"frees":{},"failures":{},)"
        R"("bytes_allocated":{},"peak_live_bytes":{},"peak_time_ns":{},"peak_log":{},"peak_line":{},)"
        R"("peak_reserved_bytes":{},"live_at_end_bytes":{},"live_at_end_count":{},"leaked_allocations":{}}})",
        c.logs, c.complete, c.events, c.allocations, c.frees, c.failures, c.bytes_allocated, c.peak_live_bytes,
        c.peak_at.time_ns, c.peak_log, c.peak_at.line,
        c.peak_reserved_bytes ? fmt::format("{}", *c.peak_reserved_bytes) : "null", c.live_at_end_bytes,
        c.live_at_end_count, c.complete ? fmt::format("{}", c.live_at_end_count) : "null");
  } else {
    fmt::format_to(out, R"(,"combined":null)");
  }
  fmt::format_to(out, "}}\n");
  return s;
}

}  // namespace gpumem::tools
