#include "observe/report.hpp"

#include "observe/call_sites.hpp"
#include "observe/event_log.hpp"
#include "observe/stack_table.hpp"
#include "observe/whole_file.hpp"
#include "serve/allocation_registry.hpp"
#include "serve/created_memory.hpp"
#include "serve/device_chains.hpp"
#include "serve/process_chains.hpp"
#include "shim_state.hpp"

#include <gpumem/config.hpp>
#include <gpumem/detail/quiet_io.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>
#include <gpumem/stream_tracker.hpp>

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace gpumem::shim {
namespace {

std::string bytes(std::uint64_t b) { return config::format_bytes(b); }
std::uint64_t u(std::int64_t v) { return v < 0 ? 0 : static_cast<std::uint64_t>(v); }

constexpr std::size_t leaks_shown = 5;

}  // namespace

std::string build_report() {
  auto& st = state();
  std::string out = fmt::format("gpumem report (pid {}, configuration: {})\n", getpid(), st.settings.source);
  bool any_chain = false;
  for_each_chain([&](device_chain& c) {
    any_chain = true;
    auto& live = c.chain->live_stats();
    auto& dev = c.chain->device_stats();
    auto const info = c.chain->info();
    out += fmt::format("device {}: {}\n", c.device, c.chain->describe());
    out += fmt::format("  allocations {}  frees {}  failed {}\n", live.allocations().total, live.deallocations(),
                       live.failed_allocations());
    out += fmt::format("  peak live {}  peak reserved {}  now live {}  reserved {}\n", bytes(u(live.bytes().peak)),
                       bytes(u(dev.bytes().peak)), bytes(u(live.bytes().current)), bytes(info.reserved_bytes));
    out += fmt::format("  pool: cached free {}  largest free block {}  fragmentation {:.2f}\n", bytes(info.free_bytes),
                       bytes(info.largest_free_block), info.fragmentation());
    if (info.pages_released_total != 0) {
      out += fmt::format(
          "  pages: {} unmapped from free blocks (given back to the device, or moved by a miss to where it needed "
          "them) and {} mapped again in released addresses over the run, in {:.1f} ms (driver calls and waits for "
          "the GPU); {} of the pool's addresses hold no memory now\n",
          bytes(info.pages_released_total), bytes(info.pages_recommitted_total),
          static_cast<double>(info.page_work_ns) / 1e6, bytes(info.released_bytes));
    }
    // Below a pool these are its growths and releases: each a driver call (three for vmm).
    out += fmt::format("  reached the device resource: {} allocations, {} frees\n", dev.allocations().total,
                       dev.deallocations());
    if (auto const made = created_on(c.device); made.created != 0) {
      out += fmt::format(
          "  created by the program itself (cuMemCreate, not pooled): {} handles ({}) live now, peak {}, {} created\n",
          made.handles, bytes(made.bytes), bytes(made.peak), made.created);
    }
    if (st.settings.sync == config::sync_mode::safe) {
      auto& tracker = stream_tracker::of(c.device);
      out += fmt::format(
          "  safe mode: {} reclamation barriers (GPU-side, no host wait; each joins the {} non-blocking "
          "streams{} known now), {} waiting for one (peak {})\n",
          tracker.barrier_count(), tracker.non_blocking_stream_count(),
          tracker.green_context_count() == 0 ? std::string{}
                                             : fmt::format(" and {} green contexts", tracker.green_context_count()),
          bytes(info.pending_bytes), bytes(info.peak_pending_bytes));
    }
  });
  if (!any_chain) out += "no device chain was built (no allocation reached gpumem)\n";
  append_process_chain_reports(out);
  out += fmt::format(
      "pass-through: {} allocations ({} captured), {} frees; double frees refused: {}; IPC refused: {}\n",
      st.stats.passthrough_allocations.get(), st.stats.captured_passthroughs.get(), st.stats.passthrough_frees.get(),
      st.stats.double_frees.get(), st.stats.ipc_refused.get());
  out += fmt::format("device synchronizations made by gpumem: {}\n", st.stats.device_syncs.get());
  if (stacks_enabled()) {
    out += fmt::format(
        "call stacks: {} recorded, {} not recorded (the stack table was full), {} lines not written to the stack "
        "files\n",
        stacks_recorded(), stacks_dropped(), stack_lines_lost());
  }

  struct leak {
    std::uintptr_t p;
    allocation a;
  };
  std::vector<leak> leaks;
  registry().for_each_live([&](std::uintptr_t p, allocation const& a) { leaks.push_back({p, a}); });
  std::size_t total = 0;
  for (auto const& l : leaks) total += l.a.bytes;
  if (leaks.empty()) {
    out += "leaks: none (every allocation was freed)\n";
    return out;
  }
  out += fmt::format("leaks: {} allocations ({}) outstanding at exit; largest:\n", leaks.size(), bytes(total));
  auto const shown = std::min(leaks.size(), leaks_shown);
  std::partial_sort(leaks.begin(), leaks.begin() + static_cast<std::ptrdiff_t>(shown), leaks.end(),
                    [](leak const& x, leak const& y) { return x.a.bytes > y.a.bytes; });
  for (std::size_t i = 0; i < shown; ++i) {
    auto const& l = leaks[i];
    out += fmt::format("  {:#x}  {}  {}  device {}  {}\n", l.p, bytes(l.a.bytes), l.a.entry ? l.a.entry : "?",
                       l.a.device, to_string(l.a.kind));
  }
  return out;
}

namespace {

// Whether any call of this process reached gpumem (a chain, a pass-through, a refusal).
bool reached_gpumem() {
  bool any = false;
  for_each_chain([&](device_chain&) { any = true; });
  auto const& st = state().stats;
  return any || process_chain_totals(process_memory::pinned).built ||
         process_chain_totals(process_memory::managed).built || st.passthrough_allocations.get() != 0 ||
         st.passthrough_frees.get() != 0 || st.failed_allocations.get() != 0 || st.double_frees.get() != 0 ||
         st.ipc_refused.get() != 0;
}

}  // namespace

void print_report_at_exit() noexcept {
  try {
    auto const& file = state().settings.report_file;
    // A launcher under gpumem-run (torchrun, mpirun) loads the shim but allocates
    // nothing; its report file would replace its first rank's (same name: rank 0).
    if (!file.empty() && !reached_gpumem()) return;
    std::string const text = build_report();
    if (!file.empty()) {
      auto const path = config::expand_template(file, 0);
      int const err = write_whole_file(path.c_str(), text.data(), text.size());
      if (err == 0) return;
      // Never lost silently: say why, and show it here instead.
      message(level::error, "cannot write the report to '%s': %s; printing it here instead", path.c_str(),
              std::strerror(err));
    }
    // Not through stdio: a stderr nobody reads any more must not kill the program
    // with SIGPIPE as it exits.
    std::fflush(stderr);
    (void)detail::write_all_without_sigpipe(STDERR_FILENO, text.data(), text.size());
  } catch (...) {
    // Exit must go on.
  }
}

}  // namespace gpumem::shim
