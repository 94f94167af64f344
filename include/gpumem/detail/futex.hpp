#pragma once
// Waking and waiting on a 32-bit word between the threads of one process: how
// the log's helper threads sleep until there is work, with no lock a signal
// handler or an exiting thread could be left holding. Both calls are
// async-signal-safe (one system call each).

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <ctime>

namespace gpumem::detail {

/// Wakes one thread waiting on `word` (the caller changed it first).
inline void futex_wake(std::atomic<std::uint32_t>* word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

/// Sleeps while `word` still holds `seen`, at most `timeout_ns`; returns at once
/// when it changed already. Spurious returns happen: the caller looks again.
inline void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t seen, std::int64_t timeout_ns) noexcept {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000), static_cast<long>(timeout_ns % 1'000'000'000)};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
}

}  // namespace gpumem::detail
