#pragma once
// The measurements of gpumem_compare. Each runs every contender at every point of its
// grid, interleaved (for each point: A B C ...), one sample per point per call; the
// program is called once per round, so rounds interleave too. Each contender is made
// fresh for a point and destroyed after it (so each starts from an empty device), and
// warmed before it is timed.

#include "contender.hpp"
#include "device.hpp"
#include "replay_plan.hpp"
#include "samples.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gpumem_compare {

struct run_options {
  bool quick = false;
  double time_scale = 1.0;  ///< multiplies every timed target (tiny for smoke tests)
  std::vector<std::uint64_t> latency_sizes;
  std::vector<std::uint64_t> scaling_sizes;
  std::vector<int> scaling_threads;
  std::vector<replay_plan> replays;
};

struct run_context {
  run_options const& options;
  device_info const& device;
  sample_writer& out;
  std::vector<contender_kind> const& kinds;  ///< this round's order
  stream_set const& streams;                 ///< at least as many as the most threads
  spin_launcher const& spin;

  /// A fresh contender, or nullptr after writing a note that names `measurement`.
  [[nodiscard]] std::unique_ptr<contender> make(contender_kind const& kind, char const* measurement) const;
  /// Seconds a timed sample should take.
  [[nodiscard]] double target(double full_seconds, double quick_seconds) const {
    return (options.quick ? quick_seconds : full_seconds) * options.time_scale;
  }
};

void measure_latency(run_context const& ctx);
void measure_scaling(run_context const& ctx);
void measure_random_allocations(run_context const& ctx);
void measure_multi_stream(run_context const& ctx);
void measure_replay(run_context const& ctx);

/// The scaling measurement's control row (no allocator; size 0 in its samples).
inline constexpr char const* cpu_control_name = "(CPU loop, no allocator)";
/// The second control row: the same with eight independent chains (fills a core).
inline constexpr char const* cpu_throughput_control_name = "(CPU loop, 8 chains, no allocator)";

}  // namespace gpumem_compare
