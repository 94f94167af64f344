#pragma once
// The shim's CSV allocation log (settings.log_file): one row per event the shim
// sees at its entry points — chain allocations and frees, failures, pass-through
// allocations and frees, refused double frees — with the entry point and device.
//
// The file name is a template (%p pid, %r rank, %h host, %d device); it is expanded
// per device when first needed, and devices whose names expand alike share one
// writer. csv_log_writer keeps rows across a crash and appends from forked children.
//
// Thread safety: log_event from any thread; writers are created under a mutex once.

#include <gpumem/csv_log_writer.hpp>

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace gpumem::shim {

struct event {
  log_action action = log_action::allocate;
  void const* pointer = nullptr;
  std::size_t size = 0;
  CUstream stream = nullptr;
  int device = -1;
  const char* entry = nullptr;
  std::int64_t start_ns = 0;  ///< CLOCK_REALTIME at entry (event_clock())
  CUresult result = CUDA_SUCCESS;
};

/// Whether a log file is configured (read once).
[[nodiscard]] bool logging_enabled() noexcept;
/// Start time for an event: 0 (no clock read) when logging is off.
[[nodiscard]] std::int64_t event_clock() noexcept;
/// Appends the row; never throws.
void log_event(event const& e) noexcept;

}  // namespace gpumem::shim
