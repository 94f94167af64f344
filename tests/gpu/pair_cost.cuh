#pragma once
// Times an allocate+free pair per size for pinned_test and managed_test "cost": five
// rounds per size, each of up to 2000 pairs or about 20 ms, whichever ends first, so
// that CUDA's own pairs (up to tens of milliseconds each) keep a run short while a
// pool's (about a microsecond) still fill thousands of pairs. Prints the median.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <vector>

template <class Pair>
void time_pairs(char const* what, Pair pair) {
  using clock = std::chrono::steady_clock;
  for (std::size_t n = std::size_t{4} << 10; n <= std::size_t{64} << 20; n *= 4) {
    pair(n);  // a pool keeps this block for the rounds
    std::vector<double> rounds;
    int counted = 0;
    for (int round = 0; round < 5; ++round) {
      auto const t0 = clock::now();
      auto const stop = t0 + std::chrono::milliseconds{20};
      int pairs = 0;
      do {
        pair(n);
        ++pairs;
      } while (pairs < 2000 && clock::now() < stop);
      rounds.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count() / pairs);
      counted += pairs;
    }
    std::sort(rounds.begin(), rounds.end());
    std::printf("%s %8zu KiB: %10.3f us (median of 5 rounds, %d pairs)\n", what, n >> 10, rounds[2], counted);
  }
}
