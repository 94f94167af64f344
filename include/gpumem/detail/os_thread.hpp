#pragma once
// Cheap per-row facts about the calling thread and the clock, for log rows and
// allocation records.

#include <pthread.h>

#include <cstdint>
#include <ctime>

namespace gpumem::detail {

/// The calling thread's id once read; 0 before (os_thread_id()).
inline thread_local std::uint64_t tl_thread_id = 0;
/// os_thread_id()'s first call on a thread: reads the id and caches it.
[[nodiscard]] std::uint64_t read_thread_id() noexcept;

/// The OS thread id (gettid), cached per thread (one TLS load per call: every
/// logged row asks). Correct in a forked child: a pthread_atfork child handler
/// clears the forking thread's cache, the only thread the child has.
[[nodiscard]] inline std::uint64_t os_thread_id() noexcept {
  if (std::uint64_t const id = tl_thread_id; id != 0) [[likely]]
    return id;
  return read_thread_id();
}

/// CLOCK_REALTIME in nanoseconds since the epoch (vDSO, no syscall).
[[nodiscard]] inline std::int64_t realtime_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// CLOCK_MONOTONIC in nanoseconds, for durations.
[[nodiscard]] inline std::int64_t monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// Offset of local time from UTC (seconds) at `time_ns`. localtime_r runs at most
/// once per wall-clock hour (process-wide cache), so a DST change is picked up
/// within the hour and no row pays for the time-zone lookup.
[[nodiscard]] std::int32_t local_utc_offset(std::int64_t time_ns) noexcept;

/// Starts a helper thread of gpumem's own, named `name` (at most 15 characters),
/// with every signal blocked: the program's signal handlers never run on it, and
/// signals meant for the program go to the program's threads. False when no
/// thread could be started.
[[nodiscard]] bool start_quiet_thread(pthread_t& thread, const char* name, void* (*body)(void*), void* arg) noexcept;

}  // namespace gpumem::detail
