#pragma once
// log_clock: the timestamps of allocation-log rows. A CLOCK_REALTIME read costs
// 34-41 ns on an H200 host, a cycle-counter read 20-22; a logged pair takes two, so
// rows take cycle-counter reads (x86-64's TSC where it is invariant and the
// kernel's clocksource; arm64's CNTVCT; else CLOCK_MONOTONIC ns) converted here:
// ticks to ns by a rate calibrated against CLOCK_MONOTONIC (over ~100 us at first
// use, then again each time the span has doubled: about 1 ppm after a second),
// and to the wall clock by a per-thread anchor (ticks, CLOCK_REALTIME) re-read
// once a millisecond, so TimeNs follows NTP within a millisecond.
//
// Thread safety: thread-safe and lock-free after the first call, which
// calibrates once per process. Fork-safe.

#include <atomic>
#include <cstdint>
#include <ctime>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace gpumem::detail {

enum class tick_source : int { unknown = 0, cycle_counter = 1, monotonic = 2 };

extern std::atomic<int> g_tick_source;                   ///< set once, by the first call
[[nodiscard]] std::uint64_t log_ticks_first() noexcept;  ///< picks the source, then reads it

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

/// An event's start on CLOCK_REALTIME and its duration, from its log_ticks()
/// (the end read just now).
struct row_time {
  std::int64_t start_ns{};      ///< CLOCK_REALTIME, ns since the epoch
  std::uint64_t duration_ns{};  ///< 0 if the counter went backwards
};
[[nodiscard]] row_time log_row_time(std::uint64_t start_ticks, std::uint64_t end_ticks) noexcept;

/// The calling thread's conversion now, for ticks converted later or elsewhere
/// (the journal's helper, recovery): `real_ns` (CLOCK_REALTIME) at `ticks`,
/// `mult` ns per tick in 32.32 fixed point (0: none).
struct tick_anchor {
  std::uint64_t ticks{};
  std::int64_t real_ns{};
  std::uint64_t mult{};
};
[[nodiscard]] tick_anchor log_tick_anchor() noexcept;
/// An event's time by `anchor` (elapsed_ticks negative: duration 0).
[[nodiscard]] row_time to_row_time(tick_anchor const& anchor, std::uint64_t start_ticks,
                                   std::int64_t elapsed_ticks) noexcept;

/// The source in use (after the first log_ticks()), for tests and benchmarks.
[[nodiscard]] tick_source log_tick_source() noexcept;

}  // namespace gpumem::detail
