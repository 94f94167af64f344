#include "shim_state.hpp"

#include "observe/event_log.hpp"
#include "observe/report.hpp"
#include "serve/allocation_registry.hpp"
#include "serve/capture_guard.hpp"
#include "serve/created_memory.hpp"
#include "serve/device_chains.hpp"
#include "serve/host_memory.hpp"
#include "serve/ipc_sharing.hpp"
#include "serve/live_streams.hpp"
#include "serve/own_context_memory.hpp"
#include "serve/release.hpp"

#include <gpumem/config.hpp>
#include <gpumem/stream_tracker.hpp>

#include <pthread.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdlib>

namespace gpumem::shim {
namespace {

// A forked child starts clean: CUDA state does not survive fork, so neither may
// ours. Locks held by other parent threads at fork time are re-created, not waited on.
void on_fork_child() noexcept {
  registry().reset_after_fork();
  reset_chains_after_fork();
  stream_tracker::reset_after_fork();
  reset_streams_after_fork();
  reset_parked_blocks_after_fork();
  reset_created_after_fork();
  reset_own_context_after_fork();
  reset_release_after_fork();
  reset_host_after_fork();
  reset_ipc_after_fork();
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
      set_log_level(s.settings.log_level);
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

constinit std::atomic<shim_state*> g_loaded_state{nullptr};

shim_state& load_state_once() noexcept {
  static shim_state* const s = [] {
    tl_loading = true;
    // NOLINTNEXTLINE(bugprone-unhandled-exception-at-new): running out of memory here ends the process
    auto* st = new shim_state{};  // never destroyed: hooks may run during exit
    load_state(*st);
    tl_loading = false;
    if (st->mode == shim_mode::config_error && st->policy == config::on_error::passthrough) {
      // Not message(): it would ask for this state. The configuration did not load,
      // so the default log level applies.
      log_message(level::error, "%s", st->config_message.c_str());
      log_message(level::error, "on_error = passthrough: every CUDA call goes to CUDA untouched");
    }
    pthread_atfork(nullptr, nullptr, on_fork_child);
    if (st->mode == shim_mode::active && st->settings.report) std::atexit(print_report_at_exit);
    return st;
  }();
  g_loaded_state.store(s, std::memory_order_release);
  return *s;
}

bool interposing_allocations_or_exit() noexcept {
  auto& s = state();
  if (s.mode == shim_mode::active) return true;
  // Never run with a configuration other than the one asked for.
  if (s.mode == shim_mode::config_error && s.policy == config::on_error::fail) {
    exit_refusing_configuration(s.config_message);
  }
  return false;
}

void exit_refusing_configuration(std::string_view why) noexcept {
  log_unfiltered("%.*s", static_cast<int>(why.size()), why.data());
  log_unfiltered(
      "refusing to run with a different configuration (set on_error = \"passthrough\" or "
      "GPUMEM_ON_ERROR=passthrough to run without gpumem)");
  _exit(1);
}

bool hooks_wanted() noexcept {
  if (tl_loading) return true;
  auto const& s = state();
  return s.mode == shim_mode::active || (s.mode == shim_mode::config_error && s.policy == config::on_error::fail);
}

bool message_enabled(level lvl) noexcept {
  static_cast<void>(state());  // the configured level applies from the first message on
  return log_enabled(lvl);
}

void message(level lvl, const char* fmt, ...) noexcept {
  if (!message_enabled(lvl)) return;
  va_list ap;
  va_start(ap, fmt);
  log_message_v(lvl, fmt, ap);
  va_end(ap);
}

}  // namespace gpumem::shim
