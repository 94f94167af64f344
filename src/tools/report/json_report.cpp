// JSON rendering for machines and tests: every number exact (bytes, ns, indices).
// Optional values are null when the log lacks the column.
#include "report.hpp"

#include <fmt/format.h>

#include <iterator>

namespace gpumem::tools {

namespace {

using out_it = std::back_insert_iterator<std::string>;

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    auto const c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string position(log_position const& p) {
  return fmt::format(R"({{"event_index":{},"line":{},"time_ns":{},"time":{}}})", p.event_index, p.line, p.time_ns,
                     p.clock_us < 0 ? "null" : json_string(format_time_of_day(p.clock_us)));
}

std::string allocation(parsed_log const& log, allocation_record const& a) {
  return fmt::format(R"({{"pointer":"{:#x}","size":{},"thread":{},"stream":{},"device":{},"entry":{},"at":{}}})",
                     a.pointer, a.size, a.thread, a.stream, a.device, json_string(log.string(a.entry)),
                     position(a.at));
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

void one_log(out_it out, analysed_log const& a) {
  auto const& s = a.summary;
  auto const& log = a.log;
  fmt::format_to(out, R"({{"path":{},"dialect":"{}","columns":{},"lines":{},)", json_string(s.path), s.dialect,
                 log.columns.count, log.lines);
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
  fmt::format_to(out, R"("live_at_end_bytes":{},"reused_live_pointers":{},"leaks":)", s.live_at_end_bytes,
                 s.reused_live_pointers);
  array(out, s.leaks, [&](allocation_record const& r) { return allocation(log, r); });
  fmt::format_to(out, R"(,"largest":)");
  array(out, s.largest, [&](allocation_record const& r) { return allocation(log, r); });
  fmt::format_to(out, R"(,"failed":)");
  array(out, s.failed, [&](failure_record const& f) {
    return fmt::format(R"({{"size":{},"thread":{},"stream":{},"entry":{},"result":{},"at":{}}})", f.size, f.thread,
                       f.stream, json_string(log.string(f.entry)),
                       f.result ? json_string(log.string(f.result)) : "null", position(f.at));
  });
  fmt::format_to(out, R"(,"unknown_frees":)");
  array(out, s.unknown_frees, [&](unknown_free_record const& u) {
    return fmt::format(R"({{"pointer":"{:#x}","size":{},"thread":{},"stream":{},"at":{}}})", u.pointer, u.size,
                       u.thread, u.stream, position(u.at));
  });
  fmt::format_to(out, R"(,"histogram":)");
  array(out, s.histogram, [](histogram_bucket const& b) {
    return fmt::format(R"({{"min":{},"max":{},"count":{},"bytes":{}}})", b.lo, b.hi, b.count, b.bytes);
  });
  auto keyed = [](key_counts const& k) {
    return fmt::format(R"({{"id":{},"allocations":{},"frees":{},"failures":{},"bytes_allocated":{}}})", k.key,
                       k.allocations, k.frees, k.failures, k.bytes_allocated);
  };
  fmt::format_to(out, R"(,"threads":)");
  array(out, s.threads, keyed);
  fmt::format_to(out, R"(,"streams":)");
  array(out, s.streams, keyed);
  fmt::format_to(out, R"(,"devices":)");
  array(out, s.devices, keyed);
  fmt::format_to(out, R"(,"warning_count":{},"warnings":)", log.warning_count);
  array(out, log.warnings, [](log_diagnostic const& d) { return json_string(d.text()); });
  fmt::format_to(out, "}}");
}

}  // namespace

std::string json_report(report_data const& r) {
  std::string s;
  auto out = std::back_inserter(s);
  fmt::format_to(out, R"({{"logs":[)");
  for (std::size_t i = 0; i < r.logs.size(); ++i) {
    if (i) fmt::format_to(out, ",");
    one_log(out, r.logs[i]);
  }
  fmt::format_to(out, R"(],"unreadable":)");
  array(out, r.unreadable, [](log_diagnostic const& d) { return json_string(d.text()); });
  if (r.combined) {
    auto const& c = *r.combined;
    fmt::format_to(out,
                   R"(,"combined":{{"logs":{},"events":{},"allocations":{},"frees":{},"failures":{},)"
                   R"("bytes_allocated":{},"peak_live_bytes":{},"peak_time_ns":{},"peak_log":{},"peak_line":{},)"
                   R"("live_at_end_bytes":{},"leaked_allocations":{}}})",
                   c.logs, c.events, c.allocations, c.frees, c.failures, c.bytes_allocated, c.peak_live_bytes,
                   c.peak_time_ns, c.peak_log, c.peak_at.line, c.live_at_end_bytes, c.leaked_allocations);
  } else {
    fmt::format_to(out, R"(,"combined":null)");
  }
  fmt::format_to(out, "}}\n");
  return s;
}

}  // namespace gpumem::tools
