// cudaMalloc+cudaFree pairs through the preloaded shim, for the cost of its CSV
// log: run it under the shim with and without GPUMEM_LOG_FILE and compare the
// pair times (target: the log adds at most 100 ns per pair).
//
//   LD_PRELOAD=<build>/lib/libgpumem_shim.so LD_LIBRARY_PATH=<build>/simdevice
//     [GPUMEM_LOG_FILE=/tmp/pair.csv [GPUMEM_LOG_QUEUE=1]] bin/log_shim_pair
//
// Linked against libcudart.so.13 (the simulated device's on this machine, the
// toolkit's on a GPU host). Without the shim it times plain CUDA.
//
// The process runs one idle thread of its own, as every CUDA process does (the
// driver's, a framework's): in a process with a single thread glibc takes
// shortcuts in mutexes and malloc that end when the log starts its helper
// thread, and the comparison would charge that to the log. On a shared, noisy
// machine compare the "min" rows (--benchmark_repetitions=N).
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

double min_of(std::vector<double> const& v) { return *std::min_element(v.begin(), v.end()); }

/// Ten untimed pairs (the pool has its slab, the log its first pages); false, and the
/// benchmark skipped, if CUDA refuses them.
bool warm(benchmark::State& state, std::size_t bytes) {
  void* p = nullptr;
  for (int i = 0; i < 10; ++i) {
    if (cudaMalloc(&p, bytes) != cudaSuccess || cudaFree(p) != cudaSuccess) {
      state.SkipWithError("cudaMalloc/cudaFree failed");
      return false;
    }
  }
  return true;
}

void timed_pairs(benchmark::State& state, std::size_t bytes) {
  void* p = nullptr;
  for (auto _ : state) {
    (void)cudaMalloc(&p, bytes);
    benchmark::DoNotOptimize(p);
    (void)cudaFree(p);
  }
  state.SetItemsProcessed(state.iterations());
}

void cuda_malloc_free(benchmark::State& state) {
  auto const bytes = static_cast<std::size_t>(state.range(0));
  if (warm(state, bytes)) timed_pairs(state, bytes);
}
BENCHMARK(cuda_malloc_free)
    ->Arg(256)
    ->Arg(1 << 20)
    ->Threads(1)
    ->Threads(8)
    ->UseRealTime()
    ->ComputeStatistics("min", min_of);

// The same pairs with the log's pages ready: 100 ms before the timed loop (off
// the clock) for the log's helper thread to prepare the next 4 MiB of the file,
// then 15000 pairs (3.3 MB of rows) that stay inside them. This is the writer's
// own cost, as on a host with a spare core for the helper; on a loaded machine
// the plain benchmark also times page faults the helper had no CPU to take first.
void cuda_malloc_free_pages_ready(benchmark::State& state) {
  auto const bytes = static_cast<std::size_t>(state.range(0));
  if (!warm(state, bytes)) return;
  usleep(100000);
  timed_pairs(state, bytes);
}
BENCHMARK(cuda_malloc_free_pages_ready)->Arg(256)->Iterations(15000)->ComputeStatistics("min", min_of);

// Pairs amid other work, as in a program that computes between allocations:
// each pair is followed by about 1 us of arithmetic, off the clock (only the
// pairs are timed, so the host's speed swings in the arithmetic do not swamp the
// difference). Back-to-back pairs above time the log's throughput; here a helper
// thread that formats rows (GPUMEM_LOG_QUEUE=1) has time to keep up, and the
// difference with and without the log is its cost on the allocating thread.
void cuda_malloc_free_amid_work(benchmark::State& state) {
  auto const bytes = static_cast<std::size_t>(state.range(0));
  if (!warm(state, bytes)) return;
  void* p = nullptr;
  std::uint64_t x = 1;
  for (auto _ : state) {
    auto const t0 = std::chrono::steady_clock::now();
    (void)cudaMalloc(&p, bytes);
    benchmark::DoNotOptimize(p);
    (void)cudaFree(p);
    auto const t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    for (int i = 0; i < 1000; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;  // dependent chain
    benchmark::DoNotOptimize(x);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(cuda_malloc_free_amid_work)->Arg(256)->UseManualTime()->ComputeStatistics("min", min_of);

}  // namespace

int main(int argc, char** argv) {
  std::thread{[] { pause(); }}.detach();           // see the file comment
  if (cudaFree(nullptr) != cudaSuccess) return 1;  // context before timing
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
