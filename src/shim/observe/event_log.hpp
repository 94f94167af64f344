#pragma once
// The shim's CSV allocation log (settings.log_file): one row per event the shim
// sees at its entry points — chain allocations and frees, failures, pass-through
// allocations and frees, refused double frees — with the entry point, the device
// and the bytes the device's chain then holds from the device (Reserved).
//
// The file name is a template (%p pid, %r rank, %h host, %d device); it is expanded
// per device when first needed, and devices whose names expand alike share one
// writer. csv_log_writer keeps rows across a crash, appends from forked children,
// moves to "<path>.<pid>" when another process holds the path, and reports
// dropped rows and truncation through message().
//
// Cost per row: one cycle-counter read at entry (event_clock(); detail::log_clock)
// and one 64-byte record stored in the log's journal (row_journal.hpp); a helper
// thread formats it. The counter is read again at the end, for DurationNs, only
// when the call did something that may take long (a driver call, a free-list lock
// another thread held, the pool's slow path: detail/slow_work.hpp); a call served
// from gpumem's free lists leaves DurationNs empty. On an H100 host a counter read
// costs 20-30 ns, about as much as the pool's whole allocate+free pair.
//
// Stacks (settings.stacks > 0): the stack of an event is written to "<log>.stacks"
// (stack_file.hpp) before the row that refers to it.
//
// Thread safety: log_event from any thread; writers are created under a mutex once.

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

/// When an event started (event_clock()): the log's counter, and the thread's
/// slow-work count then, so the end knows whether the call is worth timing.
struct event_start {
  std::uint64_t ticks = 0;  ///< detail::log_ticks(); 0 when logging is off
  std::uint32_t slow_work = 0;
};

/// An event's row as its hook knows it; the thread, the times, Reserved and
/// Stack are filled in when it is logged.
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

/// What an event needs, decided at the first look (read once): a row (a log file
/// is configured), a call stack (stacks are on), or nothing. Every allocation and
/// free asks, so with neither on an event costs one load and a branch, inline.
enum event_needs : unsigned { needs_decided = 1U, needs_row = 2U, needs_stack = 4U };
extern std::atomic<unsigned> g_event_needs;  ///< 0 until decided
[[nodiscard]] unsigned decide_event_needs() noexcept;
[[nodiscard]] inline unsigned event_needs_now() noexcept {
  unsigned const n = g_event_needs.load(std::memory_order_relaxed);
  return n != 0 ? n : decide_event_needs();
}

/// Whether a log file is configured (read once).
[[nodiscard]] inline bool logging_enabled() noexcept { return (event_needs_now() & needs_row) != 0; }
/// Start stamp for an event: nothing read when logging is off.
[[nodiscard]] inline event_start event_clock() noexcept {
  if (!logging_enabled()) return {};
  return {detail::log_ticks(), detail::slow_work_count()};
}
/// log_event's work: the stack, then the row.
void record_event(log_row& row, event_start start) noexcept;
/// Records the event's call stack when stacks are on (call_sites.hpp), then
/// appends the row (its Stack column: the stack's id); never throws.
inline void log_event(log_row row, event_start start) noexcept {
  if ((event_needs_now() & (needs_row | needs_stack)) != 0) record_event(row, start);
}

/// The log file written for `device` and its stack table ("" when stacks are off
/// or it could not be opened); false when there is no log.
bool log_paths(int device, std::string& log, std::string& stacks) noexcept;

/// Lines that could not be written to the logs' stack tables (stack_file), all logs
/// together.
[[nodiscard]] std::uint64_t stack_lines_lost() noexcept;

/// Throws config_error (key log_file, or GPUMEM_LOG_FILE when that set it) when
/// the log cannot be written at the path its template gives for device 0: a
/// directory, not a regular file (/dev/full), a name past NAME_MAX or PATH_MAX, a
/// missing or unwritable folder, an unwritable file. Creates nothing.
void check_log_path(config::settings const& st);

}  // namespace gpumem::shim
