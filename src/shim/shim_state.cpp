#include "shim_state.hpp"

#include "allocation_registry.hpp"
#include "capture_guard.hpp"
#include "device_chains.hpp"
#include "live_streams.hpp"
#include "event_log.hpp"
#include "report.hpp"

#include <gpumem/config.hpp>
#include <gpumem/stream_tracker.hpp>

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gpumem::shim {
namespace {

level parse_level(std::string const& s) noexcept {
  if (s == "trace") return level::trace;
  if (s == "debug") return level::debug;
  if (s == "info") return level::info;
  if (s == "error") return level::error;
  if (s == "off") return level::off;
  return level::warn;
}

// A forked child starts clean: CUDA state does not survive fork, so neither may
// ours. Locks held by other parent threads at fork time are re-created, not waited on.
void on_fork_child() noexcept {
  registry().reset_after_fork();
  reset_chains_after_fork();
  stream_tracker::reset_after_fork();
  reset_streams_after_fork();
  reset_parked_blocks_after_fork();
  state().stats.reset();
}

void load_state(shim_state& s) noexcept {
  try {
    auto const env = config::environment::from_process();
    try {
      s.settings = config::load(env);
      // An unusable log path is a configuration error at start, not a log that
      // silently stays empty while the program runs for hours (event_log.hpp).
      check_log_path(s.settings);
      s.mode = s.settings.disabled ? shim_mode::disabled : shim_mode::active;
      s.threshold = parse_level(s.settings.log_level);
    } catch (config::config_error const& e) {
      s.mode = shim_mode::config_error;
      s.config_message = e.what();
      s.policy = e.policy;
    }
  } catch (std::exception const& e) {
    s.mode = shim_mode::config_error;
    s.config_message = std::string{"gpumem: config error: "} + e.what();
  } catch (...) {
    s.mode = shim_mode::config_error;
    s.config_message = "gpumem: config error: unknown failure while reading the configuration";
  }
}

thread_local bool tl_loading = false;

}  // namespace

void counters::reset() noexcept {
  for (counter* c : {&chain_allocations, &runtime_allocations, &chain_frees, &passthrough_allocations,
                     &passthrough_frees, &double_frees, &failed_allocations, &captured_passthroughs,
                     &ipc_refused}) {
    c->reset();
  }
}

shim_state& state() noexcept {
  static shim_state* const s = [] {
    tl_loading = true;
    auto* st = new shim_state{};  // never destroyed: hooks may run during exit
    load_state(*st);
    tl_loading = false;
    if (st->mode == shim_mode::config_error && st->policy == config::on_error::passthrough) {
      std::fprintf(stderr, "%s\ngpumem: on_error = passthrough: every CUDA call goes to CUDA untouched\n",
                   st->config_message.c_str());
    }
    pthread_atfork(nullptr, nullptr, on_fork_child);
    if (st->mode == shim_mode::active && st->settings.report) std::atexit(print_report_at_exit);
    return st;
  }();
  return *s;
}

bool interposing_allocations() noexcept {
  auto& s = state();
  if (s.mode == shim_mode::active) return true;
  if (s.mode == shim_mode::config_error && s.policy == config::on_error::fail) {
    // Never run with a configuration other than the one asked for.
    std::fprintf(stderr, "%s\ngpumem: refusing to run with a different configuration (set on_error = "
                 "\"passthrough\" or GPUMEM_ON_ERROR=passthrough to run without gpumem)\n",
                 s.config_message.c_str());
    std::fflush(stderr);
    _exit(1);
  }
  return false;
}

bool hooks_wanted() noexcept {
  if (tl_loading) return true;
  auto const& s = state();
  return s.mode == shim_mode::active ||
         (s.mode == shim_mode::config_error && s.policy == config::on_error::fail);
}

bool message_enabled(level lvl) noexcept { return lvl >= state().threshold && lvl != level::off; }

void message(level lvl, const char* fmt, ...) noexcept {
  if (!message_enabled(lvl)) return;
  static constexpr char prefix[] = "gpumem: ";
  constexpr std::size_t prefix_len = sizeof prefix - 1;
  char stack_buf[1024];
  va_list ap;
  va_start(ap, fmt);
  va_list again;
  va_copy(again, ap);
  int const m = std::vsnprintf(stack_buf + prefix_len, sizeof stack_buf - prefix_len - 1, fmt, ap);
  va_end(ap);
  std::size_t const body = m < 0 ? 0 : static_cast<std::size_t>(m);
  char* buf = stack_buf;
  // A long message (paths near PATH_MAX) gets a buffer of its size: never cut
  // before the reason at its end. Only without memory is it cut.
  if (prefix_len + body + 1 > sizeof stack_buf) {
    if (auto* big = static_cast<char*>(std::malloc(prefix_len + body + 2)); big != nullptr) {
      std::vsnprintf(big + prefix_len, body + 1, fmt, again);
      buf = big;
    }
  }
  va_end(again);
  std::size_t const n = buf == stack_buf ? std::min(body, sizeof stack_buf - prefix_len - 2) : body;
  std::memcpy(buf, prefix, prefix_len);
  buf[prefix_len + n] = '\n';
  // One write(): lines from several threads do not interleave.
  ssize_t const w = ::write(2, buf, prefix_len + n + 1);
  (void)w;
  if (buf != stack_buf) std::free(buf);
}

}  // namespace gpumem::shim
