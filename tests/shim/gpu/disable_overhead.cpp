// Measures what a runtime entry point costs with the shim loaded but disabled
// (GPUMEM_DISABLE=1) against no shim: cudaFree(NULL) and cudaMemGetInfo are cheap
// exported calls that reach the shim's hooks. scripts/gpu-check-shim.sh runs it
// with and without the shim and prints the difference (informational, not a test).
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>

int main() {
  constexpr int n = 1000000;
  if (cudaFree(nullptr) != cudaSuccess) return 1;
  auto const t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) (void)cudaFree(nullptr);
  auto const t1 = std::chrono::steady_clock::now();
  std::size_t f = 0, t = 0;
  for (int i = 0; i < n / 10; ++i) (void)cudaMemGetInfo(&f, &t);
  auto const t2 = std::chrono::steady_clock::now();
  std::printf("cudaFree(NULL) %.1f ns/call, cudaMemGetInfo %.1f ns/call\n",
              std::chrono::duration<double, std::nano>(t1 - t0).count() / n,
              std::chrono::duration<double, std::nano>(t2 - t1).count() / (n / 10));
  return 0;
}
