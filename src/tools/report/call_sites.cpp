// Call sites of a log: the stacks behind its leaks, its peak and its failures,
// named from the stack table beside the log.
#include "report.hpp"

#include <algorithm>
#include <unordered_map>

namespace gpumem::tools {

namespace {

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

}  // namespace gpumem::tools
