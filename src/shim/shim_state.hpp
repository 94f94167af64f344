#pragma once
// The shim's process-wide state: the settings snapshot (read ONCE, at the first
// interposed call), what the shim does with calls (mode), its counters, and the
// fork handler that gives a child a clean start.
//
// Thread safety: state() is initialised once (function-local static); afterwards
// everything here is read-only or atomic.

#include <gpumem/config/settings.hpp>
#include <gpumem/detail/thread_counters.hpp>
#include <gpumem/diagnostics.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpumem::shim {

enum class shim_mode : int { active = 1, disabled = 2, config_error = 3 };

/// Message levels: gpumem's (diagnostics.hpp), as settings::log_level holds them.
using level = gpumem::log_level;

/// The shim's event counters: bumped on every allocation and free, read only by
/// the report and the query API, so each thread counts in its own slots
/// (detail::thread_counters) instead of sharing an atomic per counter.
struct counters {
  class counter {
   public:
    constexpr counter(detail::thread_counters& set, std::size_t index) noexcept : set_{&set}, index_{index} {}
    void add(std::uint64_t n = 1) const noexcept { set_->add(index_, n); }
    [[nodiscard]] std::uint64_t get() const noexcept { return set_->get(index_); }

   private:
    detail::thread_counters* set_;
    std::size_t index_;
  };
  detail::thread_counters values{10};
  counter chain_allocations{values, 0}, runtime_allocations{values, 1}, chain_frees{values, 2},
      passthrough_allocations{values, 3}, passthrough_frees{values, 4}, double_frees{values, 5},
      failed_allocations{values, 6}, captured_passthroughs{values, 7}, ipc_refused{values, 8}, device_syncs{values, 9};
  void reset() noexcept { values.reset(); }
};

struct shim_state {
  shim_mode mode = shim_mode::active;
  config::settings settings;
  std::string config_message;  ///< the config error, when mode == config_error
  config::on_error policy = config::on_error::fail;
  counters stats;
};

/// The state once loaded (published by load_state_once); null before.
extern std::atomic<shim_state*> g_loaded_state;
/// Loads the state (once, whichever thread comes first) and publishes it.
[[nodiscard]] shim_state& load_state_once() noexcept;

/// The state, loaded on first use. Never makes a CUDA call (it may run inside dlsym
/// while libcuda is being loaded). Every hook asks for it, several times per call:
/// once loaded, one load, inline.
[[nodiscard]] inline shim_state& state() noexcept {
  if (shim_state* s = g_loaded_state.load(std::memory_order_acquire)) [[likely]] { return *s; }
  return load_state_once();
}

/// True when allocations go through the chains. On a config error with policy fail
/// it does not return: it prints the error and _exit(1)s (exit_refusing_configuration),
/// so call it only from allocation entry points, where running with a different
/// configuration than the one asked for would begin.
[[nodiscard]] bool interposing_allocations_or_exit() noexcept;
/// True when the chains are in use (no exit, for frees and queries).
[[nodiscard]] inline bool active() noexcept;
/// True when handed-out function pointers should be the shim's hooks (everything
/// but pure pass-through). Never exits.
[[nodiscard]] bool hooks_wanted() noexcept;

/// One line through gpumem's diagnostics (diagnostics.hpp: "gpumem: " and one
/// write(2) to stderr), if `lvl` passes settings.log_level (loaded first if need be).
void message(level lvl, const char* fmt, ...) noexcept __attribute__((format(printf, 2, 3)));
[[nodiscard]] bool message_enabled(level lvl) noexcept;

/// The end of a process whose configuration cannot be honoured with on_error = fail:
/// prints `why` and that gpumem refuses to run with a different configuration
/// (whatever the log level: these are the process's last words), then _exit(1).
/// No atexit handler runs: the program never started under a configuration it did
/// not ask for.
[[noreturn]] void exit_refusing_configuration(std::string_view why) noexcept;

inline bool active() noexcept { return state().mode == shim_mode::active; }

/// Safe mode: allocations and frees of the synchronous family carry
/// call_context::synchronous down the chain.
[[nodiscard]] inline bool safe_mode() noexcept { return state().settings.sync == config::sync_mode::safe; }

}  // namespace gpumem::shim
