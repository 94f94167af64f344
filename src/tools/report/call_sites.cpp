// Call sites of a log: the stacks behind its leaks, its peak and its failures,
// named from the stack table beside the log; and what the renderings share to
// show them.
#include "report.hpp"

#include "units.hpp"

#include "text_escape.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <unordered_map>

namespace gpumem::tools {

namespace {

constexpr std::size_t frames_shown = 12;        // per call site, in text
constexpr std::size_t python_frames_shown = 3;  // beyond those, the innermost Python frames

std::vector<named_site> top_by(std::vector<call_site_stats> const& sites, std::size_t n, std::uint64_t& count,
                               std::uint64_t (*key)(call_site_stats const&)) {
  std::vector<call_site_stats> picked;
  for (auto const& c : sites) {
    if (c.stack != 0 && key(c) > 0) picked.push_back(c);
  }
  count = picked.size();
  std::size_t const shown = std::min(n, picked.size());
  std::partial_sort(picked.begin(), picked.begin() + static_cast<std::ptrdiff_t>(shown), picked.end(),
                    [&](call_site_stats const& a, call_site_stats const& b) {
                      return key(a) > key(b) || (key(a) == key(b) && a.stack < b.stack);
                    });
  picked.resize(shown);
  std::vector<named_site> out;
  for (auto const& c : picked) out.push_back(named_site{c, false, {}});
  return out;
}

}  // namespace

call_site_report name_call_sites(log_summary const& s, std::string const& table_path, symbolizer& sym) {
  call_site_report r;
  r.table_path = table_path;
  stack_table const table = load_stack_table(table_path);
  r.table_present = table.present;
  r.stacks_in_table = table.stacks.size();
  r.warnings = table.warnings;
  std::size_t const n = s.top_n;
  r.leaks = top_by(s.call_sites, n, r.leak_sites, [](call_site_stats const& c) { return c.live_at_end_bytes; });
  r.peak = top_by(s.call_sites, n, r.peak_sites, [](call_site_stats const& c) { return c.live_at_peak_bytes; });
  r.failures = top_by(s.call_sites, n, r.failure_sites, [](call_site_stats const& c) { return c.failures; });
  for (auto const& c : s.call_sites) {
    if (c.stack == 0) r.unattributed = c;
  }
  std::unordered_map<std::uint64_t, std::vector<symbol>> named;
  for (auto* list : {&r.leaks, &r.peak, &r.failures}) {
    for (auto& site : *list) {
      recorded_stack const* st = table.find(site.stats.stack);
      if (st == nullptr) continue;
      site.recorded = true;
      auto [it, fresh] = named.try_emplace(site.stats.stack);
      if (fresh) {
        for (auto const& f : st->frames) it->second.push_back(sym.resolve(f.address, table.module(f.module), st->pid));
      }
      site.frames = it->second;
    }
  }
  r.perf_map_used = sym.used_perf_map();
  return r;
}

std::array<site_list, 3> site_lists(log_summary const& s, call_site_report const& c) {
  return {{
      {"leaks", s.complete() ? "never freed" : "still live at the end", "by bytes", &c.leaks, c.leak_sites,
       [](call_site_stats const& x) { return x.live_at_end_bytes; },
       [](call_site_stats const& x) { return x.live_at_end_count; }, "allocations"},
      {"peak", "live at the peak", "by bytes", &c.peak, c.peak_sites,
       [](call_site_stats const& x) { return x.live_at_peak_bytes; },
       [](call_site_stats const& x) { return x.live_at_peak_count; }, "allocations"},
      {"failures", "failed allocations", "by count", &c.failures, c.failure_sites,
       [](call_site_stats const& x) { return x.failed_bytes; }, [](call_site_stats const& x) { return x.failures; },
       "failures"},
  }};
}

std::string stack_table_note(call_site_report const& c) {
  return c.table_present ? fmt::format("{} stacks recorded in {}", c.stacks_in_table, c.table_path)
                         : fmt::format("no stack table ({} is missing): stack ids only", c.table_path);
}

std::string unattributed_note(log_summary const& s, call_site_report const& c) {
  auto const& u = c.unattributed;
  if (u.allocations == 0 && u.failures == 0) return {};
  return fmt::format("without a recorded stack (sampled out): {} at the peak, {} at the end, {} of {} allocations",
                     human_bytes(u.live_at_peak_bytes), human_bytes(u.live_at_end_bytes), u.allocations, s.allocations);
}

std::string frame_lines(std::vector<symbol> const& frames, std::string_view indent) {
  std::string out;
  auto line = [&](std::size_t k) {
    fmt::format_to(std::back_inserter(out), "{}#{:<2} {}\n", indent, k, escape_text(frames[k].text()));
  };
  std::size_t shown = 0;
  for (; shown < frames.size() && shown < frames_shown; ++shown) line(shown);
  std::size_t python = 0;
  for (std::size_t k = frames_shown; k < frames.size() && python < python_frames_shown; ++k) {
    if (frames[k].what != symbol::kind::python) continue;
    line(k);
    ++python;
    ++shown;
  }
  if (frames.size() > shown) {
    fmt::format_to(std::back_inserter(out), "{}... {} more frames (--json has them all)\n", indent,
                   frames.size() - shown);
  }
  return out;
}

}  // namespace gpumem::tools
