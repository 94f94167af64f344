#pragma once
// The one-screen summary printed at exit (settings.report): per device peak live and
// reserved bytes, allocation and free counts, pool state and fragmentation, the
// call stacks recorded and those lost (when stacks are on), and the allocations
// still outstanding (leaks), largest first.
//
// Runs from an atexit handler: reads counters and host-side bookkeeping only, never
// calls CUDA (the driver may already be torn down) and never destroys a chain.

#include <string>

namespace gpumem::shim {

/// The report text (also used by tests through the same code path).
[[nodiscard]] std::string build_report();
/// atexit handler: writes build_report() to settings.report_file or stderr. When the
/// file cannot be written (opened, written or closed: /dev/full, a full disk), a
/// message names the path and the error and the report goes to stderr.
void print_report_at_exit() noexcept;

}  // namespace gpumem::shim
