#pragma once
// The shim's CSV allocation log (settings.log_file): a row for each chain
// allocation and free, failure, pass-through call and refused double free, with
// its entry point, device and Reserved. The file name is a template (%p pid, %r
// rank, %h host, %d device), expanded per device when first needed; devices whose
// names expand alike share a writer. With stacks on, an event's stack is written
// to "<log>.stacks" before the row that names it.
//
// Cost per row: one cycle-counter read at entry, and a second at the end only
// for a call that did slow work (detail/slow_work.hpp: a counter read costs
// 20-30 ns on an H100 host, as much as the pool's whole allocate+free), then a
// 64-byte record in the journal.
//
// Thread safety: log_event from any thread; writers are made once, under a mutex.

#include <gpumem/config/settings.hpp>
#include <gpumem/csv_log_writer.hpp>
#include <gpumem/detail/log_clock.hpp>
#include <gpumem/detail/slow_work.hpp>
#include <gpumem/error.hpp>
#include <gpumem/log_row.hpp>

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpumem::shim {

/// When an event started: the counter, and the thread's slow-work count then.
struct event_start {
  std::uint64_t ticks = 0;  ///< detail::log_ticks(); 0 when logging is off
  std::uint32_t slow_work = 0;
};

/// An event's row as its hook knows it (the thread, times, Reserved and Stack come later).
[[nodiscard]] inline log_row event_row(log_action action, void const* pointer, std::size_t size, CUstream stream,
                                       int device, const char* entry, CUresult result) noexcept {
  return {.action = action,
          .pointer = reinterpret_cast<std::uintptr_t>(pointer),
          .size = size,
          .stream = reinterpret_cast<std::uintptr_t>(stream),
          .device = device,
          .entry = entry,
          .result = result == CUDA_SUCCESS ? nullptr : result_name(result)};
}

/// What an event needs, decided once: a row, a call stack, or (one load and a
/// branch, inline) nothing.
enum event_needs : unsigned { needs_decided = 1U, needs_row = 2U, needs_stack = 4U };
extern std::atomic<unsigned> g_event_needs;  ///< 0 until decided
[[nodiscard]] unsigned decide_event_needs() noexcept;
[[nodiscard]] inline unsigned event_needs_now() noexcept {
  unsigned const n = g_event_needs.load(std::memory_order_relaxed);
  return n != 0 ? n : decide_event_needs();
}

[[nodiscard]] inline bool logging_enabled() noexcept { return (event_needs_now() & needs_row) != 0; }
[[nodiscard]] inline event_start event_clock() noexcept {
  if (!logging_enabled()) return {};
  return {detail::log_ticks(), detail::slow_work_count()};
}
void record_event(log_row& row, event_start start) noexcept;  ///< log_event's work
/// Records the event's stack when stacks are on (call_sites.hpp), then its row.
inline void log_event(log_row row, event_start start) noexcept {
  if ((event_needs_now() & (needs_row | needs_stack)) != 0) record_event(row, start);
}

/// The log written for `device` and its stack table (""); false when there is no log.
bool log_paths(int device, std::string& log, std::string& stacks) noexcept;

/// Lines that could not be written to the logs' stack tables, all logs together.
[[nodiscard]] std::uint64_t stack_lines_lost() noexcept;

/// Throws config_error (naming log_file or GPUMEM_LOG_FILE) when the log cannot be
/// written at its path for device 0 (not a regular file, a name too long, a
/// missing or unwritable folder or file). Creates nothing.
void check_log_path(config::settings const& st);

}  // namespace gpumem::shim
