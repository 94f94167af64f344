#include "observe/event_log.hpp"

#include "observe/call_sites.hpp"
#include "observe/stack_file.hpp"
#include "serve/device_chains.hpp"
#include "shim_state.hpp"

#include <gpumem/config.hpp>
#include <gpumem/detail/file_kind.hpp>
#include <gpumem/detail/log_clock.hpp>
#include <gpumem/detail/os_thread.hpp>
#include <gpumem/error.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gpumem::shim {
namespace {

// The writers' news (another process holds the path, rows dropped, truncated)
// as shim messages, so GPUMEM_LOG_LEVEL applies.
void notify_shim(std::string_view line) noexcept {
  message(level::warn, "%.*s", static_cast<int>(line.size()), line.data());
}

// One log and, when stacks are recorded, the stack table beside it.
struct log_sink {
  std::unique_ptr<csv_log_writer> log;
  std::unique_ptr<stack_file> stacks;  // "<log>.stacks"; null when stacks are off
  unsigned index = 0;                  // the stack file's bit in stack_table's masks
  std::atomic<std::uint32_t> truncations_seen{0};
};

struct log_sinks {
  std::mutex mtx;
  std::vector<std::unique_ptr<log_sink>> sinks;  // never destroyed (exit-time rows)
  bool failed = false;
};

// Each device's sink once made; slot max_devices: events whose device is unknown.
// Outside log_sinks so that a row finds its sink with one load, no static guard.
constinit std::array<std::atomic<log_sink*>, max_devices + 1> g_sink_by_device{};

log_sinks& sinks() noexcept {
  // NOLINTNEXTLINE(bugprone-unhandled-exception-at-new): running out of memory here ends the process
  static auto* const s = new log_sinks{};
  return *s;
}

std::size_t sink_slot(int device) noexcept {
  return static_cast<std::size_t>(device >= 0 && device < max_devices ? device : max_devices);
}

// sink_for()'s first call for a device: makes (or finds) its sink.
[[gnu::noinline]] log_sink* make_sink(int device) noexcept {
  auto const slot = sink_slot(device);
  auto& s = sinks();
  std::lock_guard lock{s.mtx};
  if (auto* w = g_sink_by_device[slot].load(std::memory_order_acquire)) return w;
  if (s.failed) return nullptr;
  try {
    auto const path = config::expand_template(state().settings.log_file, device < 0 ? 0 : device);
    log_sink* w = nullptr;
    for (auto const& existing : s.sinks) {
      if (existing->log->requested_path() == path) w = existing.get();
    }
    if (w == nullptr) {
      auto sink = std::make_unique<log_sink>();
      sink->log = std::make_unique<csv_log_writer>(path, &notify_shim);
      // Beside the file actually written ("<path>.<pid>" when another process holds
      // the path), so a log and its stacks stay a pair.
      if (stacks_enabled() && s.sinks.size() < 64) {
        sink->stacks = std::make_unique<stack_file>(sink->log->path() + ".stacks");
        sink->index = static_cast<unsigned>(s.sinks.size());
      }
      s.sinks.push_back(std::move(sink));
      w = s.sinks.back().get();
    }
    g_sink_by_device[slot].store(w, std::memory_order_release);
    return w;
  } catch (std::exception const& e) {
    // Checked at start (check_log_path); this is a path that broke since, or a
    // device whose name expands differently. The program goes on: one message,
    // not one per event.
    s.failed = true;
    std::string_view what = e.what();
    if (what.starts_with("gpumem: ")) what.remove_prefix(8);
    message(level::error, "%.*s; this process goes on without an allocation log", static_cast<int>(what.size()),
            what.data());
    return nullptr;
  }
}

log_sink* sink_for(int device) noexcept {
  if (auto* w = g_sink_by_device[sink_slot(device)].load(std::memory_order_acquire)) [[likely]] { return w; }
  return make_sink(device);
}

// Bytes the device's chain holds from the device now: the statistics adaptor
// right above the device resource. Unknown (-1) before the chain exists.
std::int64_t reserved_bytes(int device) noexcept {
  device_chain* c = built_chain(device);
  if (c == nullptr || c->chain == nullptr) return -1;
  return c->chain->device_stats().current_bytes_estimate();
}

// Why `path` cannot be the log; "" if it can (or may: it does not exist yet and
// its folder is writable).
std::string log_path_problem(std::string const& path) {
  if (path.empty()) return "the name is empty";
  if (path.size() >= PATH_MAX) return std::strerror(ENAMETOOLONG);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) return detail::not_a_regular_file(st.st_mode);
    if (::access(path.c_str(), W_OK) != 0) return std::strerror(errno);
    return {};
  }
  if (errno != ENOENT) return std::strerror(errno);
  auto const slash = path.rfind('/');
  std::string const name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.size() > NAME_MAX) return std::strerror(ENAMETOOLONG);
  std::string const dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::stat(dir.c_str(), &st) != 0) return "folder '" + dir + "': " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "folder '" + dir + "': " + std::strerror(ENOTDIR);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return "folder '" + dir + "': " + std::strerror(errno);
  return {};
}

}  // namespace

void check_log_path(config::settings const& st) {
  if (st.log_file.empty() || st.disabled) return;
  std::string const path = config::expand_template(st.log_file, 0);
  std::string const problem = log_path_problem(path);
  if (problem.empty()) return;
  // The variable overrides the file: name whichever set the path.
  char const* env = std::getenv("GPUMEM_LOG_FILE");
  std::string const where = env != nullptr && *env != '\0' ? "environment: GPUMEM_LOG_FILE" : st.source + ": log_file";
  throw config::config_error{
      "gpumem: config error: " + where + ": cannot write the allocation log '" + path + "': " + problem,
      st.on_config_error};
}

constinit std::atomic<unsigned> g_event_needs{0};

unsigned decide_event_needs() noexcept {
  auto const& st = state();
  unsigned n = needs_decided;
  if (!st.settings.log_file.empty() && st.mode == shim_mode::active) n |= needs_row;
  if (stacks_enabled()) n |= needs_stack;
  g_event_needs.store(n, std::memory_order_relaxed);  // the same value whoever decides
  return n;
}

bool log_paths(int device, std::string& log, std::string& stacks) noexcept {
  if (!logging_enabled()) return false;
  log_sink* w = sink_for(device);
  if (w == nullptr) return false;
  try {
    log = w->log->path();
    stacks = w->stacks != nullptr && w->stacks->usable() ? w->stacks->path() : std::string{};
    return true;
  } catch (...) { return false; }
}

std::uint64_t stack_lines_lost() noexcept {
  auto& s = sinks();
  std::lock_guard lock{s.mtx};
  std::uint64_t n = 0;
  for (auto const& sink : s.sinks) {
    if (sink->stacks != nullptr) n += sink->stacks->lost_lines();
  }
  return n;
}

void record_event(log_row& row, event_start start) noexcept {
  unsigned const needs = event_needs_now();
  bool const row_wanted = (needs & needs_row) != 0;
  // The end first (the stack walk and the row's own work are not the call's), and
  // only for a call that may have taken long: one served from the free lists did
  // no slow work and leaves DurationNs empty (detail/slow_work.hpp).
  bool const measured = row_wanted && detail::slow_work_count() != start.slow_work;
  std::uint64_t const end = measured ? detail::log_ticks() : 0;
  stack_ref const stack = (needs & needs_stack) != 0 ? note_call_site(row) : stack_ref{};
  if (!row_wanted) return;
  log_sink* const sink = sink_for(row.device);
  if (sink == nullptr) return;
  csv_log_writer* const w = sink->log.get();
  if (stack && sink->stacks != nullptr) {
    // A log emptied under us took the stacks its rows referred to: write them again.
    std::uint32_t const cut = w->truncations();
    if (std::uint32_t seen = sink->truncations_seen.load(std::memory_order_relaxed);
        cut != seen && sink->truncations_seen.compare_exchange_strong(seen, cut, std::memory_order_relaxed)) {
      forget_written(sink->index);
    }
    // Before the row: a row never refers to a stack its stack file lacks.
    write_stack_once(stack, *sink->stacks, sink->index);
  }
  row.thread_id = detail::os_thread_id();
  if (row.reserved < 0) row.reserved = reserved_bytes(row.device);  // set already: a process chain's row
  row.stack = stack.id;
  // The counter values alone: the journal's helper converts them to the wall clock.
  w->write(row, start.ticks, end);
}

}  // namespace gpumem::shim
