#pragma once
// The allocation log's SIGBUS guard (csv_log_writer.hpp, "The file is truncated
// under the writer") lent to another MAP_SHARED file mapping of gpumem's own
// (row_journal's ring): one handler for both, so neither replaces the other.

#include <cstddef>

namespace gpumem::detail {

/// Called inside the SIGBUS handler, on the faulting thread, before the page is
/// replaced: it must be async-signal-safe (atomics, a futex wake). `offset`: the
/// faulting page's offset in the guarded range.
using fault_fn = void (*)(void* context, std::size_t offset) noexcept;

/// From now on a fault inside [begin, begin + bytes) (a page past the end of a
/// truncated file) calls `on_fault`, then maps an anonymous zero page over the
/// faulting one, so the access goes on there. False when the guard's table is
/// full (the range is then not guarded).
bool guard_mapping(void* begin, std::size_t bytes, fault_fn on_fault, void* context) noexcept;
/// Before the range is unmapped.
void unguard_mapping(void* begin) noexcept;

}  // namespace gpumem::detail
