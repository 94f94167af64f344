// Host time of cudaMalloc+cudaFree and cudaMallocAsync+cudaFreeAsync pairs, run by
// scripts/gpu-check-shim.sh with and without the shim (informational, not a test;
// the run without the shim gives the plain-CUDA numbers to compare with).
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <initializer_list>

int main() {
  if (cudaFree(nullptr) != cudaSuccess) return 1;
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return 1;
  for (std::size_t bytes : {std::size_t{256}, std::size_t{1} << 20, std::size_t{64} << 20}) {
    constexpr int n = 2000;
    void* p = nullptr;
    for (int i = 0; i < 10; ++i) {  // warm
      if (cudaMalloc(&p, bytes) != cudaSuccess || cudaFree(p) != cudaSuccess) return 1;
    }
    auto const t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      (void)cudaMalloc(&p, bytes);
      (void)cudaFree(p);
    }
    auto const t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      (void)cudaMallocAsync(&p, bytes, s);
      (void)cudaFreeAsync(p, s);
    }
    (void)cudaStreamSynchronize(s);
    auto const t2 = std::chrono::steady_clock::now();
    std::printf("%9zu B: cudaMalloc+cudaFree %8.2f us   cudaMallocAsync+cudaFreeAsync %6.2f us\n", bytes,
                std::chrono::duration<double, std::micro>(t1 - t0).count() / n,
                std::chrono::duration<double, std::micro>(t2 - t1).count() / n);
  }
  return 0;
}
