#pragma once
// The allocation log's SIGBUS guard (csv_log_writer.hpp, "The file is truncated
// under the writer") lent to another MAP_SHARED file mapping of gpumem's own
// (row_journal's ring): one handler for both, so neither replaces the other; and
// the program's own SIGBUS handler kept behind it (sigbus_sigaction).

#include <signal.h>

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

using sigaction_fn = int (*)(int, struct sigaction const*, struct sigaction*);

/// sigaction(SIGBUS, act, old) as the program asked it, for the preloaded shim's
/// sigaction and signal hooks: before the guard is installed it is `real` (the C
/// library's). Once it is, the guard stays the kernel's handler, `act` becomes
/// the action the guard passes every SIGBUS that is not the log's to (handler,
/// mask, SA_SIGINFO, SA_RESETHAND and SA_NODEFER kept), and `old` receives the
/// action the program set before, as sigaction would have answered without
/// gpumem. Returns 0, or -1 with errno set (from `real`). Async-signal-safe.
int sigbus_sigaction(struct sigaction const* act, struct sigaction* old, sigaction_fn real) noexcept;

}  // namespace gpumem::detail
