#pragma once
// The host's speed at the moment, measured inside the process that times the
// allocators: on a shared or virtual machine the same binary runs at different
// speeds from one process to the next (CPU frequency, memory placement, neighbours),
// and a pair latency means little without knowing which state its process ran in.
//
// Three dependent chains and one throughput loop, each timed once (about 0.2 s):
//   alu_ns     one 64-bit multiply-add whose result feeds the next (the core's clock)
//   issue_ns   eight independent multiply-adds: the core's throughput
//   cache_ns   one load of a random cycle through 128 KiB (L2 latency)
//   memory_ns  one load of a random cycle through 64 MiB (DRAM latency, TLB misses
//              included: what the program's cold data costs)
//
// What they do not see: on the H100 host of docs/runs/2026-11-25-h100-session20.md
// the shim's pair ran at half speed in some windows of a process and at full speed
// in others while all four figures stayed put; bench/shim_pair_windows.cpp times
// such windows directly.

namespace gpumem_compare {

struct host_speed {
  double alu_ns = 0;
  double issue_ns = 0;
  double cache_ns = 0;
  double memory_ns = 0;
};

/// Measures the four figures now. Allocates 64 MiB of host memory for the call.
[[nodiscard]] host_speed probe_host_speed();

}  // namespace gpumem_compare
