// log_clock: cycle-counter timestamps for log rows (include/gpumem/detail/log_clock.hpp).

#include <gpumem/detail/log_clock.hpp>
#include <gpumem/detail/os_thread.hpp>

#include <fcntl.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstring>
#include <mutex>

namespace gpumem::detail {

std::atomic<int> g_tick_source{static_cast<int>(tick_source::unknown)};

namespace {

__extension__ using u128 = unsigned __int128;  // one multiply instruction; no overflow for any span

constexpr std::int64_t first_calibration_ns = 100'000;  // ~0.1% rate error to start with
constexpr std::int64_t anchor_life_ns = 1'000'000;      // re-read CLOCK_REALTIME once a millisecond

std::uint64_t scale(std::uint64_t ticks, std::uint64_t mult) noexcept {
  return static_cast<std::uint64_t>((static_cast<u128>(ticks) * mult) >> 32U);
}

std::int64_t scale_signed(std::int64_t ticks, std::uint64_t mult) noexcept {
  return ticks >= 0 ? static_cast<std::int64_t>(scale(static_cast<std::uint64_t>(ticks), mult))
                    : -static_cast<std::int64_t>(scale(~static_cast<std::uint64_t>(ticks) + 1, mult));
}

struct calibration {
  std::uint64_t ticks0 = 0;  ///< the first calibration pair: never changes after init
  std::int64_t mono0 = 0;
  std::atomic<std::uint64_t> mult{std::uint64_t{1} << 32U};  ///< ns per tick, 32.32 fixed point
  std::atomic<std::uint64_t> baseline{0};                    ///< ticks mult was measured over
  std::atomic<std::uint64_t> anchor_life{anchor_life_ns};    ///< ticks in anchor_life_ns
  std::atomic<bool> refining{false};
};

calibration g_cal;
std::once_flag g_init;

struct clock_pair {
  std::uint64_t ticks;
  std::int64_t mono;
};

#if defined(__x86_64__) || defined(__aarch64__)
// A counter value and CLOCK_MONOTONIC read as close together as possible: the
// tightest of a few brackets (an interrupt inside one bracket is skipped).
clock_pair read_pair() noexcept {
  clock_pair best{};
  std::uint64_t best_width = ~std::uint64_t{0};
  for (int i = 0; i < 5; ++i) {
    std::uint64_t const t0 = read_cycle_counter();
    std::int64_t const m = monotonic_ns();
    std::uint64_t const t1 = read_cycle_counter();
    if (t1 >= t0 && t1 - t0 < best_width) {
      best_width = t1 - t0;
      best = {t0 + (t1 - t0) / 2, m};
    }
  }
  return best;
}

bool rate_from(clock_pair const& a, clock_pair const& b, std::uint64_t& mult) noexcept {
  if (b.ticks <= a.ticks || b.mono <= a.mono) return false;
  auto const ns = static_cast<u128>(b.mono - a.mono) << 32U;
  auto const m = ns / (b.ticks - a.ticks);
  // Between 0.01 and 100 ns per tick (10 MHz .. 100 GHz): anything else is not a clock.
  if (m < (static_cast<u128>(1) << 32U) / 100 || m > (static_cast<u128>(100) << 32U)) { return false; }
  mult = static_cast<std::uint64_t>(m);
  return true;
}
#endif

#if defined(__x86_64__)
// The TSC is a wall-clock-grade source only if it is invariant (CPUID) and the
// kernel agrees: it is the current clocksource (not on a VM whose TSC the
// kernel distrusts, not after the kernel marked it unstable).
bool cycle_counter_usable() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000U, &a, &b, &c, &d) == 0 || a < 0x80000007U) return false;
  if (__get_cpuid(0x80000007U, &a, &b, &c, &d) == 0 || (d & (1U << 8U)) == 0) return false;
  int const fd = ::open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[16] = {};
  ssize_t const n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  return n >= 3 && std::strncmp(buf, "tsc", 3) == 0 && (n == 3 || buf[3] == '\n');
}
#elif defined(__aarch64__)
bool cycle_counter_usable() noexcept { return true; }  // CNTVCT: constant rate, what the kernel's vDSO reads
#else
bool cycle_counter_usable() noexcept { return false; }
#endif

void init() noexcept {
#if defined(__x86_64__) || defined(__aarch64__)
  if (cycle_counter_usable()) {
    clock_pair const first = read_pair();
    while (monotonic_ns() - first.mono < first_calibration_ns) {}
    clock_pair const second = read_pair();
    std::uint64_t mult = 0;
    if (rate_from(first, second, mult)) {
      g_cal.ticks0 = first.ticks;
      g_cal.mono0 = first.mono;
      g_cal.mult.store(mult, std::memory_order_relaxed);
      g_cal.baseline.store(second.ticks - first.ticks, std::memory_order_relaxed);
      g_cal.anchor_life.store((static_cast<std::uint64_t>(anchor_life_ns) << 32U) / mult, std::memory_order_relaxed);
      g_tick_source.store(static_cast<int>(tick_source::cycle_counter), std::memory_order_release);
      return;
    }
  }
#endif
  g_tick_source.store(static_cast<int>(tick_source::monotonic), std::memory_order_release);
}

// Once the counter has run twice as long as the current rate was measured over,
// measure it again over the whole span: the error halves each time, for the
// cost of one CLOCK_MONOTONIC read every doubling.
void refine_rate(std::uint64_t now) noexcept {
#if defined(__x86_64__) || defined(__aarch64__)
  // Acquire, pairing with init()'s release: a thread that never went through
  // call_once (log_ticks() reads the source relaxed) must still see ticks0 and mono0,
  // and reanchor()'s calibrated mult, as init() wrote them.
  if (g_tick_source.load(std::memory_order_acquire) != static_cast<int>(tick_source::cycle_counter)) return;
  auto const baseline = g_cal.baseline.load(std::memory_order_relaxed);
  if (now - g_cal.ticks0 < 2 * baseline || g_cal.refining.exchange(true, std::memory_order_acquire)) return;
  clock_pair const p = read_pair();
  std::uint64_t mult = 0;
  if (p.ticks > g_cal.ticks0 && rate_from({g_cal.ticks0, g_cal.mono0}, p, mult)) {
    g_cal.mult.store(mult, std::memory_order_relaxed);
    g_cal.baseline.store(p.ticks - g_cal.ticks0, std::memory_order_relaxed);
  }
  g_cal.refining.store(false, std::memory_order_release);
#else
  (void)now;
#endif
}

// Per thread: the wall clock at a known tick count, re-read once `life` ticks
// have passed. `life` starts at 0, so the first row of a thread anchors it.
struct anchor {
  tick_anchor at;
  std::uint64_t life = 0;
};
// Out of line: one __tls_get_addr per row in a shared library, not one per use.
[[gnu::noinline]] anchor& thread_anchor() noexcept {
  static thread_local anchor a;
  return a;
}

[[gnu::noinline]] void reanchor(anchor& a) noexcept {
  // Refined first: its clock reads (when it refines) must not fall between the two
  // tick reads that bracket the wall-clock read, or the anchor's tick would be early.
  refine_rate(log_ticks());
  // The wall clock's tick is the bracket's middle, so a bracket the thread was
  // preempted in (a vCPU descheduled, an interrupt) would put every row of the
  // next millisecond off by half its width: seen as 16 us on a VM. Take the
  // tightest of a few, stopping at one under a thousandth of the anchor's life.
  std::uint64_t const life = g_cal.anchor_life.load(std::memory_order_relaxed);
  std::uint64_t best_width = ~std::uint64_t{0};
  for (int i = 0; i < 4 && best_width > life / 1000; ++i) {
    std::uint64_t const t0 = log_ticks();
    std::int64_t const real = realtime_ns();
    std::uint64_t const t1 = log_ticks();
    std::uint64_t const width = t1 >= t0 ? t1 - t0 : ~std::uint64_t{0} - 1;  // backwards: kept only if alone
    if (width >= best_width) continue;
    best_width = width;
    a.at.ticks = t0 + (t1 - t0) / 2;
    a.at.real_ns = real;
  }
  a.at.mult = g_cal.mult.load(std::memory_order_relaxed);
  a.life = life;
}

// The calling thread's anchor, re-read first when its life has passed by `now`.
tick_anchor const& current_anchor(std::uint64_t now) noexcept {
  anchor& a = thread_anchor();
  if (now - a.at.ticks >= a.life) [[unlikely]]
    reanchor(a);
  return a.at;
}

}  // namespace

std::uint64_t log_ticks_first() noexcept {
  std::call_once(g_init, init);
  return log_ticks();
}

row_time to_row_time(tick_anchor const& anchor, std::uint64_t start_ticks, std::int64_t elapsed_ticks) noexcept {
  auto const from_anchor = static_cast<std::int64_t>(start_ticks - anchor.ticks);
  return {anchor.real_ns + scale_signed(from_anchor, anchor.mult),
          elapsed_ticks > 0 ? scale(static_cast<std::uint64_t>(elapsed_ticks), anchor.mult) : 0};
}

row_time log_row_time(std::uint64_t start_ticks, std::uint64_t end_ticks) noexcept {
  return to_row_time(current_anchor(end_ticks), start_ticks, static_cast<std::int64_t>(end_ticks - start_ticks));
}

tick_anchor log_tick_anchor() noexcept { return current_anchor(log_ticks()); }

tick_source log_tick_source() noexcept {
  return static_cast<tick_source>(g_tick_source.load(std::memory_order_relaxed));
}

}  // namespace gpumem::detail
