#include "host_probe.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace gpumem_compare {
namespace {

using probe_clock = std::chrono::steady_clock;

double ns_per_step(probe_clock::time_point t0, std::size_t steps) {
  return std::chrono::duration<double, std::nano>(probe_clock::now() - t0).count() / static_cast<double>(steps);
}

// ns per load of a random single cycle through `bytes` (Sattolo's shuffle: every
// slot is visited before the chase comes back, so no prefetcher can guess it).
double chase(std::size_t bytes, std::size_t steps) {
  std::size_t const n = bytes / sizeof(std::size_t);
  std::vector<std::size_t> next(n);
  std::iota(next.begin(), next.end(), std::size_t{0});
  std::mt19937_64 rng{42};
  for (std::size_t i = n - 1; i > 0; --i) {
    std::size_t const j = std::uniform_int_distribution<std::size_t>{0, i - 1}(rng);
    std::swap(next[i], next[j]);
  }
  std::size_t at = 0;
  for (std::size_t i = 0; i < n; ++i) at = next[at];  // once round, untimed: pages and caches warm
  auto const t0 = probe_clock::now();
  for (std::size_t i = 0; i < steps; ++i) at = next[at];
  double const ns = ns_per_step(t0, steps);
  volatile std::size_t sink = at;  // the chase must not be optimised away
  static_cast<void>(sink);
  return ns;
}

}  // namespace

host_speed probe_host_speed() {
  host_speed h;
  constexpr std::size_t alu_steps = 20'000'000;
  std::uint64_t x = 1;
  auto const t0 = probe_clock::now();
  for (std::size_t i = 0; i < alu_steps; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    asm volatile("" : "+r"(x));  // one dependent step per iteration, never folded
  }
  h.alu_ns = ns_per_step(t0, alu_steps);
  volatile std::uint64_t sink = x;
  static_cast<void>(sink);
  constexpr std::size_t issue_steps = 5'000'000;
  std::uint64_t lanes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  auto const t1 = probe_clock::now();
  for (std::size_t i = 0; i < issue_steps; ++i) {
    for (auto& v : lanes) {
      v = v * 6364136223846793005ULL + 1442695040888963407ULL;
      asm volatile("" : "+r"(v));
    }
  }
  h.issue_ns = ns_per_step(t1, issue_steps * 8);
  sink = lanes[0] ^ lanes[7];
  h.cache_ns = chase(std::size_t{128} << 10, 4'000'000);
  h.memory_ns = chase(std::size_t{64} << 20, 2'000'000);
  return h;
}

}  // namespace gpumem_compare
