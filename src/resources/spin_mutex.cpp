#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/spin_mutex.hpp>

#include <sched.h>
#include <time.h>

#include <algorithm>

namespace gpumem::detail {
namespace {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

GPUMEM_COLD void spin_mutex::lock_contended() noexcept {
  // Spin on a load (no cache-line ping-pong), exchange only when it looks free.
  constexpr int spins = 128;
  constexpr int yields = 16;
  constexpr long max_pause_ns = 50'000;
  long pause_ns = 1'000;
  for (int round = 0;; ++round) {
    if (!locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire)) return;
    if (round < spins) {
      cpu_relax();
    } else if (round < spins + yields) {
      sched_yield();
    } else {
      timespec const t{0, pause_ns};
      nanosleep(&t, nullptr);
      pause_ns = std::min(pause_ns * 2, max_pause_ns);
    }
  }
}

}  // namespace gpumem::detail
