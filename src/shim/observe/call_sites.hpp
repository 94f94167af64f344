#pragma once
// Which events get a call stack (settings.stacks, stack_sample, stack_min_size),
// and the live bytes per stack kept up to date as allocations come and go.
//
//   allocation     every stack_sample-th of the calling thread, and every one of at
//                  least stack_min_size bytes
//   failure        always (they are few, and what a user asks about)
//   free           none; a free takes its allocation's bytes off that stack (the
//                  allocation registry carries each allocation's stack)
//
// Thread safety: any thread; the sampling counter is per thread.

#include "observe/event_log.hpp"
#include "observe/stack_table.hpp"

#include <cstdint>

namespace gpumem::shim {

/// Whether stacks are recorded (settings.stacks > 0 and the shim is active; read once).
[[nodiscard]] bool stacks_enabled() noexcept;

/// The stack recorded for `e` (none for most frees and unsampled allocations); keeps
/// the live bytes per stack. Called once per event, on the thread that made it.
[[nodiscard]] stack_ref note_call_site(log_row const& e) noexcept;

/// The calling thread's stack, recorded in the table (for the out-of-memory snapshot).
[[nodiscard]] stack_ref record_current_stack() noexcept;

}  // namespace gpumem::shim
