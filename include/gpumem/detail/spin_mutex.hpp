#pragma once
// spin_mutex: the lock of one free list (a stream's, the clean list's, a pending
// shard's). Those locks are taken twice per allocate+free pair and are almost never
// contended (one thread per stream is the common case), so what they cost is what
// an uncontended lock costs: one atomic exchange to lock and a plain release store
// to unlock, against two atomic read-modify-writes plus a call for std::mutex
// (measured on an H100 host: 27 ns per std::mutex lock+unlock, 10 ns per exchange).
//
// Contended, it spins briefly (the holders' critical sections are a few tree
// operations), then yields, then sleeps with growing pauses up to 50 us: a holder
// may make a driver call under the lock (an event record; a release giving slabs
// back), and waiters must not burn a core meanwhile. Not fair, not recursive.
// Meets Lockable (std::lock_guard, std::unique_lock, std::scoped_lock).
//
// Header-only (the contended path is out of line and cold all the same), so the
// shim's pointer registry, a library of its own, takes the same lock.

#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/slow_work.hpp>

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>

namespace gpumem::detail {

/// One round of a spin-wait: lets the core know (and a sibling hyperthread run).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

class spin_mutex {
 public:
  spin_mutex() noexcept = default;
  spin_mutex(spin_mutex const&) = delete;
  spin_mutex& operator=(spin_mutex const&) = delete;

  void lock() noexcept {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;  // the uncontended case
    lock_contended();
  }
  [[nodiscard]] bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  void lock_contended() noexcept;

  std::atomic<bool> locked_{false};
};

GPUMEM_COLD inline void spin_mutex::lock_contended() noexcept {
  note_slow_work();  // waiting for another thread: the call may take long
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
