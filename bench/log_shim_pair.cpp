// cudaMalloc+cudaFree pairs through the preloaded shim, for the cost of its CSV
// log: run it under the shim with and without GPUMEM_LOG_FILE and compare the
// pair times (issue target: the log adds at most 100 ns per pair).
//
//   LD_PRELOAD=<build>/lib/libgpumem_shim.so LD_LIBRARY_PATH=<build>/simdevice
//     [GPUMEM_LOG_FILE=/tmp/pair.csv] bin/log_shim_pair
//
// Linked against libcudart.so.13 (the simulated device's on this machine, the
// toolkit's on a GPU host). Without the shim it times plain CUDA.
#include <cuda_runtime_api.h>

#include <benchmark/benchmark.h>

namespace {

void cuda_malloc_free(benchmark::State& state) {
  auto const bytes = static_cast<std::size_t>(state.range(0));
  void* p = nullptr;
  for (int i = 0; i < 10; ++i) {  // warm: the pool has its slab, the log its first pages
    if (cudaMalloc(&p, bytes) != cudaSuccess || cudaFree(p) != cudaSuccess) {
      state.SkipWithError("cudaMalloc/cudaFree failed");
      return;
    }
  }
  for (auto _ : state) {
    (void)cudaMalloc(&p, bytes);
    benchmark::DoNotOptimize(p);
    (void)cudaFree(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(cuda_malloc_free)->Arg(256)->Arg(1 << 20)->Threads(1)->Threads(8)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  if (cudaFree(nullptr) != cudaSuccess) return 1;  // context before timing
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
