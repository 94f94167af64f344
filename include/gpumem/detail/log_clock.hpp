#pragma once
// log_clock: the timestamps of allocation-log rows, at a few ns per read.
//
// A row needs its start on the wall clock (TimeNs, comparable across processes)
// and its duration. Two CLOCK_REALTIME reads per row cost 50-60 ns; instead the
// row takes two reads of a cycle counter (x86-64 TSC, or the arm64 generic
// timer's CNTVCT) and converts them here:
//
//   ticks  -> ns     by a rate calibrated against CLOCK_MONOTONIC: first over
//                    ~100 us when the clock is first used, then refined each
//                    time the baseline has doubled (the error shrinks with it:
//                    about 1 ppm after a second)
//   ticks  -> wall   by a per-thread anchor (ticks, CLOCK_REALTIME) re-read once
//                    a millisecond has passed on the thread, so TimeNs follows
//                    NTP slewing and clock steps within a millisecond
//
// So a thread logging many rows pays one counter read per row plus, once per
// millisecond, one CLOCK_REALTIME read. The counter is used only where it is a
// wall-clock-grade source: on x86-64 an invariant TSC (CPUID) that the kernel
// itself uses as its clocksource; on arm64 always. Elsewhere ticks are
// CLOCK_MONOTONIC nanoseconds (same conversions, rate exactly 1; no saving).
//
// Accuracy: durations within the rate's error (below 0.1% from the start,
// ppm later); TimeNs within the rate error times 1 ms of CLOCK_REALTIME. A row
// whose thread re-anchored between its start and end may show TimeNs a few
// hundred ns off the rows around it; rows in the file stay in log order.
//
// Thread safety: everything here is thread-safe and lock-free after the first
// call (which calibrates, once per process, under std::call_once). Fork-safe:
// the counter and the calibration are the same in a child.

#include <atomic>
#include <cstdint>
#include <ctime>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace gpumem::detail {

enum class tick_source : int { unknown = 0, cycle_counter = 1, monotonic = 2 };

/// Which source log_ticks() reads; set once by the first call.
extern std::atomic<int> g_tick_source;

/// Picks the source (first call), then reads it.
[[nodiscard]] std::uint64_t log_ticks_first() noexcept;

/// The cycle counter (x86-64 TSC, arm64 CNTVCT); 0 elsewhere.
[[nodiscard]] inline std::uint64_t read_cycle_counter() noexcept {
#if defined(__x86_64__)
  return __rdtsc();
#elif defined(__aarch64__)
  std::uint64_t v = 0;
  asm volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  return 0;
#endif
}

/// A point in time for log rows: an opaque tick count, cheap to take.
[[nodiscard]] inline std::uint64_t log_ticks() noexcept {
  int const source = g_tick_source.load(std::memory_order_relaxed);
  if (source == static_cast<int>(tick_source::cycle_counter)) [[likely]]
    return read_cycle_counter();
  if (source == static_cast<int>(tick_source::monotonic)) {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000U + static_cast<std::uint64_t>(ts.tv_nsec);
  }
  return log_ticks_first();
}

/// When an event that started at `start_ticks` and ended at `end_ticks`
/// (log_ticks(), read just now) happened: its start on CLOCK_REALTIME and its
/// duration.
struct row_time {
  std::int64_t start_ns{};      ///< CLOCK_REALTIME, ns since the epoch
  std::uint64_t duration_ns{};  ///< 0 if the counter went backwards
};
[[nodiscard]] row_time log_row_time(std::uint64_t start_ticks, std::uint64_t end_ticks) noexcept;

/// The conversion of ticks to the wall clock that log_row_time() uses on the
/// calling thread now: `real_ns` (CLOCK_REALTIME) at `ticks`, `mult` ns per
/// tick in 32.32 fixed point. For ticks converted later or elsewhere (a helper
/// thread formatting queued rows, another process recovering them). mult == 0:
/// none.
struct tick_anchor {
  std::uint64_t ticks{};
  std::int64_t real_ns{};
  std::uint64_t mult{};
};
[[nodiscard]] tick_anchor log_tick_anchor() noexcept;
/// An event's time by `anchor`: it started at `start_ticks` and lasted
/// `elapsed_ticks` (negative: the counter went backwards; duration 0).
[[nodiscard]] row_time to_row_time(tick_anchor const& anchor, std::uint64_t start_ticks,
                                   std::int64_t elapsed_ticks) noexcept;

/// The source in use (after the first log_ticks()), for tests and benchmarks.
[[nodiscard]] tick_source log_tick_source() noexcept;

}  // namespace gpumem::detail
