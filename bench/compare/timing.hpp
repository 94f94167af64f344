#pragma once
// Timing loops shared by the comparison programs (gpumem_compare, gpumem_compare_shim).
//
// pair_latency(): one thread, `pair()` repeated on a warm allocator; host time per pair,
// over the whole timed loop and in its fastest fifth (a host whose speed changes while
// the loop runs shows the difference; docs/benchmarks.md, "How to time on this host").
// thread_scaling(): T threads, each with its own pair function (its own stream), released
// together from a spin gate. Each thread does the SAME number of pairs; the headline rate
// is total pairs / makespan (first start to last finish): what a program whose threads
// each have that much work sees. The rate Google Benchmark would report for the same run
// (total pairs / MEAN per-thread loop time) is kept beside it, with the spread between
// the fastest and slowest thread: when threads do not run their loops at the same time,
// the two disagree (see docs/benchmarks.md, "Why two harnesses disagree").
//
// Nothing here allocates, locks or writes shared memory inside a timed loop: per-thread
// results go to separate cache lines after the loop. Workers wait between rounds
// blocked (not spinning), and are released together from a spin gate.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace gpumem_compare {

using bench_clock = std::chrono::steady_clock;

inline double seconds_between(bench_clock::time_point a, bench_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

/// Result of a timed loop of `pairs` pairs.
struct pair_timing {
  double ns_per_pair = 0;
  double fastest_window_ns = 0;  ///< per pair, in the fastest of the loop's timing_windows equal parts
  std::uint64_t pairs = 0;
  bool failed = false;  ///< a pair reported failure; the figure is then meaningless
};

/// The equal parts a timed pair loop is cut into for pair_timing::fastest_window_ns.
inline constexpr std::uint64_t timing_windows = 5;

/// Times `pair()` (returns false on failure): `warmup` untimed pairs first, then
/// enough pairs for about `target_seconds` (at least `min_pairs`), calibrated by a
/// short first loop. Host time only: asynchronous allocators' device work is not waited for.
template <class Pair>
pair_timing pair_latency(Pair&& pair, double target_seconds, std::uint64_t warmup = 8, std::uint64_t min_pairs = 3) {
  pair_timing r;
  for (std::uint64_t i = 0; i < warmup; ++i) {
    if (!pair()) {
      r.failed = true;
      return r;
    }
  }
  auto run = [&](std::uint64_t n) -> double {
    auto const t0 = bench_clock::now();
    for (std::uint64_t i = 0; i < n; ++i) {
      if (!pair()) {
        r.failed = true;
        return 0;
      }
    }
    return seconds_between(t0, bench_clock::now());
  };
  // Calibrate with a loop of at most ~1/8 of the target.
  std::uint64_t n = min_pairs;
  double t = run(n);
  while (!r.failed && t < target_seconds / 8 && n < (std::uint64_t{1} << 32)) {
    n *= 4;
    t = run(n);
  }
  if (r.failed) return r;
  double const per_pair = t / static_cast<double>(n);
  std::uint64_t const want = std::max<std::uint64_t>(
      min_pairs, static_cast<std::uint64_t>(target_seconds / std::max(per_pair, 1e-10)));
  // The same loop in timing_windows back-to-back parts (one clock read between them).
  std::uint64_t const per_window = std::max<std::uint64_t>(1, want / timing_windows);
  double total = 0;
  double fastest = 0;
  for (std::uint64_t w = 0; w < timing_windows; ++w) {
    double const part = run(per_window);
    if (r.failed) return r;
    total += part;
    fastest = w == 0 ? part : std::min(fastest, part);
  }
  r.pairs = per_window * timing_windows;
  r.ns_per_pair = total * 1e9 / static_cast<double>(r.pairs);
  r.fastest_window_ns = fastest * 1e9 / static_cast<double>(per_window);
  return r;
}

/// One timed round of thread_scaling.
struct scaling_round {
  std::uint64_t pairs_per_thread = 0;
  double makespan_s = 0;     ///< first thread's start to last thread's end
  double mean_thread_s = 0;  ///< mean of each thread's own loop time
  double fastest_thread_s = 0;
  double slowest_thread_s = 0;
  bool failed = false;
  [[nodiscard]] double total_pairs(int threads) const { return static_cast<double>(pairs_per_thread) * threads; }
  /// What a program sees: all the work over the time it took.
  [[nodiscard]] double pairs_per_second(int threads) const {
    return makespan_s > 0 ? total_pairs(threads) / makespan_s : 0;
  }
  /// Google Benchmark's items_per_second for the same run (UseRealTime, Threads(n)).
  [[nodiscard]] double mean_thread_rate(int threads) const {
    return mean_thread_s > 0 ? total_pairs(threads) / mean_thread_s : 0;
  }
};

struct scaling_result {
  scaling_round cold;   ///< the first pairs on a fresh allocator, no warm-up
  scaling_round timed;  ///< after warm-up, sized to about target_seconds of makespan
};

/// Runs `threads` threads; thread i calls make_pair(i) once (on its own thread, before
/// any timing) to get its pair function. Rounds: cold (`probe` pairs each, fresh
/// allocator), warm-up (`probe` pairs, untimed), calibration (`probe` pairs), timed.
template <class MakePair>
scaling_result thread_scaling(int threads, MakePair&& make_pair, double target_seconds, std::uint64_t probe = 64) {
  struct alignas(64) slot {
    bench_clock::time_point t0, t1;
    bool failed = false;
  };
  std::vector<slot> slots(static_cast<std::size_t>(threads));
  // Each round: the main thread arms it (workers wake from a blocking wait and spin),
  // waits until every worker spins, then opens the gate, so all start within
  // nanoseconds. A worker that finished blocks instead of spinning: on a machine
  // with fewer free cores (or hyperthreads) it must not slow the others down.
  std::atomic<int> armed{-1};    // round the workers should get ready for
  std::atomic<int> gate{-1};     // round the workers may start
  std::atomic<int> spinning{0};  // workers ready at the gate of the armed round
  std::atomic<int> finished{0};  // workers done with the current round
  std::atomic<int> ready{0};     // workers past make_pair
  std::atomic<std::uint64_t> round_pairs{probe};
  constexpr int rounds = 4;  // cold, warm-up, calibration, timed

  auto worker = [&](int i) {
    auto pair = make_pair(i);
    ready.fetch_add(1, std::memory_order_acq_rel);
    auto& s = slots[static_cast<std::size_t>(i)];
    for (int r = 0; r < rounds; ++r) {
      for (int a = armed.load(std::memory_order_acquire); a < r; a = armed.load(std::memory_order_acquire)) {
        armed.wait(a, std::memory_order_acquire);
      }
      spinning.fetch_add(1, std::memory_order_acq_rel);
      while (gate.load(std::memory_order_acquire) < r) cpu_relax();
      std::uint64_t const n = round_pairs.load(std::memory_order_acquire);
      bool ok = !s.failed;
      s.t0 = bench_clock::now();
      for (std::uint64_t k = 0; ok && k < n; ++k) ok = pair();
      s.t1 = bench_clock::now();
      s.failed = !ok;
      finished.fetch_add(1, std::memory_order_acq_rel);
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker, i);
  while (ready.load(std::memory_order_acquire) < threads) std::this_thread::yield();

  auto run_round = [&](int r) -> scaling_round {
    finished.store(0, std::memory_order_release);
    spinning.store(0, std::memory_order_release);
    armed.store(r, std::memory_order_release);
    armed.notify_all();
    while (spinning.load(std::memory_order_acquire) < threads) std::this_thread::yield();
    gate.store(r, std::memory_order_release);
    // Sleep rather than spin: the main thread must not take a core from the workers.
    while (finished.load(std::memory_order_acquire) < threads)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    scaling_round out;
    out.pairs_per_thread = round_pairs.load();
    auto first = slots[0].t0, last = slots[0].t1;
    double sum = 0, fastest = 1e300, slowest = 0;
    for (auto const& s : slots) {
      first = std::min(first, s.t0);
      last = std::max(last, s.t1);
      double const t = seconds_between(s.t0, s.t1);
      sum += t;
      fastest = std::min(fastest, t);
      slowest = std::max(slowest, t);
      out.failed = out.failed || s.failed;
    }
    out.makespan_s = seconds_between(first, last);
    out.mean_thread_s = sum / threads;
    out.fastest_thread_s = fastest;
    out.slowest_thread_s = slowest;
    return out;
  };
  scaling_result result;
  result.cold = run_round(0);
  run_round(1);  // warm-up
  scaling_round const calib = run_round(2);
  // Per pair, per thread, all running: from each thread's own loop time, so that a late
  // start (a thread without a core for a moment) does not shrink the timed round.
  double const per_pair = calib.mean_thread_s / static_cast<double>(probe);
  auto const n = static_cast<std::uint64_t>(target_seconds / std::max(per_pair, 1e-10));
  round_pairs.store(std::clamp<std::uint64_t>(n, probe, std::uint64_t{1} << 32), std::memory_order_release);
  result.timed = calib.failed ? calib : run_round(3);
  if (calib.failed) {
    // The workers still wait for round 3: let them run it with the pairs they failed on.
    round_pairs.store(0, std::memory_order_release);
    run_round(3);
  }
  for (auto& t : pool) t.join();
  return result;
}

}  // namespace gpumem_compare
