// Managed memory under the shim (managed_memory_test.cpp): prints one RESULT line of
// key=value pairs per scenario.
//   reuse    a copy queued into a block, the block freed, a new one allocated and
//            written on the host: the late copy must not land in it
//   queries  advice, prefetch and pointer queries on a pooled block; an interior
//            free and a second free refused; the attach flags kept apart
//   loop     50 allocate/free pairs; how many reached the driver
//   limit    two 600 KiB blocks (run with GPUMEM_MANAGED_LIMIT=1MiB)
//   stats    the query API's managed counters (gpumem_shim_get_managed_stats)
//   reset    blocks held and cached across cudaDeviceReset (run with
//            GPUMEM_MANAGED_LIMIT=2MiB): none handed out again, the limit freed

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>

#include "app_support.h"

#include <cstdio>
#include <cstring>
#include <string>

namespace {

long driver_calls(char const* entry) {
  using fn = long (*)(char const*);
  auto const f = reinterpret_cast<fn>(dlsym(RTLD_DEFAULT, "gpumemsim_call_count"));
  return f != nullptr ? f(entry) : -1;
}

bool all_bytes(void const* p, std::size_t n, unsigned char v) {
  auto const* b = static_cast<unsigned char const*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (b[i] != v) return false;
  }
  return true;
}

int reuse() {
  constexpr std::size_t n = 64 << 10;
  void* dev = nullptr;
  cudaStream_t s = nullptr;
  if (cudaMalloc(&dev, n) != cudaSuccess || cudaMemset(dev, 0xDD, n) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
    return 2;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  if (cudaMallocManaged(&a, n) != cudaSuccess) return 3;
  if (cudaMemcpyAsync(a, dev, n, cudaMemcpyDeviceToDevice, s) != cudaSuccess) return 4;
  if (cudaFree(a) != cudaSuccess) return 5;
  if (cudaMallocManaged(&b, n) != cudaSuccess) return 6;
  std::memset(b, 0x11, n);
  if (cudaStreamSynchronize(s) != cudaSuccess) return 7;
  bool const intact = all_bytes(b, n, 0x11);
  if (cudaDeviceSynchronize() != cudaSuccess) return 10;
  if (cudaMallocManaged(&c, n) != cudaSuccess) return 8;
  std::printf("RESULT same=%d intact=%d reused_after=%d\n", a == b ? 1 : 0, intact ? 1 : 0, c == a ? 1 : 0);
  if (cudaFree(b) != cudaSuccess || cudaFree(c) != cudaSuccess) return 9;
  cudaStreamDestroy(s);
  cudaFree(dev);
  return 0;
}

int queries() {
  constexpr std::size_t n = 10000;
  void* m = nullptr;
  if (cudaMallocManaged(&m, n, cudaMemAttachGlobal) != cudaSuccess) return 2;
  char* const interior = static_cast<char*>(m) + 5000;
  cudaMemLocation device0{};
  device0.type = cudaMemLocationTypeDevice;
  device0.id = 0;
  cudaError_t const advise = cudaMemAdvise(m, n, cudaMemAdviseSetPreferredLocation, device0);
  cudaError_t const prefetch = cudaMemPrefetchAsync(m, n, device0, 0, nullptr);
  if (cudaDeviceSynchronize() != cudaSuccess) return 3;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, interior) != cudaSuccess) return 4;
  // The driver's answer as the program gets it: the shim's hook when it is preloaded.
  using range_fn = CUresult (*)(CUdeviceptr*, std::size_t*, CUdeviceptr);
  auto const range = reinterpret_cast<range_fn>(dlsym(RTLD_DEFAULT, "cuMemGetAddressRange_v2"));
  CUdeviceptr base = 0;
  std::size_t size = 0;
  if (range == nullptr || range(&base, &size, reinterpret_cast<CUdeviceptr>(interior)) != CUDA_SUCCESS) return 5;
  cudaError_t const inside = cudaFree(interior);
  (void)cudaGetLastError();
  void* h = nullptr;
  if (cudaMallocManaged(&h, n, cudaMemAttachHost) != cudaSuccess) return 6;
  if (cudaFree(m) != cudaSuccess) return 7;
  cudaError_t const twice = cudaFree(m);
  (void)cudaGetLastError();
  cudaError_t const bad_flags = cudaMallocManaged(&m, n, 0x4);
  (void)cudaGetLastError();
  if (cudaFree(h) != cudaSuccess) return 8;
  std::printf(
      "RESULT advise=%d prefetch=%d type_managed=%d range_start=%d range_size=%zu interior_free=%d other_flag=%d "
      "second_free=%d bad_flags=%d\n",
      static_cast<int>(advise), static_cast<int>(prefetch), attr.type == cudaMemoryTypeManaged ? 1 : 0,
      base == reinterpret_cast<CUdeviceptr>(m) ? 1 : 0, size, static_cast<int>(inside), h != m ? 1 : 0,
      static_cast<int>(twice), static_cast<int>(bad_flags));
  return 0;
}

int loop() {
  if (cudaFree(nullptr) != cudaSuccess) return 5;  // the runtime loads the driver on its first call
  long const before = driver_calls("cuMemAllocManaged");
  for (int i = 0; i < 50; ++i) {
    void* p = nullptr;
    if (cudaMallocManaged(&p, 1 << 20) != cudaSuccess) return 2;
    static_cast<char*>(p)[0] = 1;
    if (cudaFree(p) != cudaSuccess) return 3;
    if (cudaDeviceSynchronize() != cudaSuccess) return 4;
  }
  std::printf("RESULT driver_allocs=%ld\n", driver_calls("cuMemAllocManaged") - before);
  return 0;
}

int limit() {
  void* a = nullptr;
  void* b = nullptr;
  cudaError_t const first = cudaMallocManaged(&a, 600 << 10);
  cudaError_t const second = cudaMallocManaged(&b, 600 << 10);
  (void)cudaGetLastError();
  std::printf("RESULT first=%d second=%d\n", static_cast<int>(first), static_cast<int>(second));
  if (first == cudaSuccess) cudaFree(a);
  if (second == cudaSuccess) cudaFree(b);
  return 0;
}

int stats() {
  gpumem_shim_managed_stats const none = app_managed_stats();
  void* a = nullptr;
  void* b = nullptr;
  if (cudaMallocManaged(&a, 100 << 10) != cudaSuccess) return 2;
  if (cudaMallocManaged(&b, 1 << 20) != cudaSuccess) return 2;
  if (cudaFree(a) != cudaSuccess) return 3;
  gpumem_shim_managed_stats const s = app_managed_stats();
  if (cudaFree(b) != cudaSuccess) return 3;
  std::printf("RESULT before=%d built=%d pooled=%d allocations=%llu frees=%llu live=%llu reserved_ge_live=%d\n",
              none.built, s.built, s.pooled, s.allocations, s.frees, s.live_bytes,
              s.reserved_bytes >= s.live_bytes ? 1 : 0);
  return 0;
}

int reset() {
  constexpr std::size_t n = 1 << 20;
  void* held = nullptr;
  void* cached = nullptr;
  if (cudaMallocManaged(&held, n) != cudaSuccess || cudaMallocManaged(&cached, n) != cudaSuccess) return 2;
  if (cudaFree(cached) != cudaSuccess) return 3;
  if (cudaDeviceReset() != cudaSuccess) return 4;  // both blocks die with the context
  long const before = driver_calls("cuMemAllocManaged");
  void* a = nullptr;
  void* b = nullptr;
  cudaError_t const first = cudaMallocManaged(&a, n);
  cudaError_t const second = cudaMallocManaged(&b, n);
  (void)cudaGetLastError();
  if (first == cudaSuccess) std::memset(a, 1, n);
  if (second == cudaSuccess) std::memset(b, 2, n);
  // Each new block a fresh allocation: the dead cached one never comes back.
  std::printf("RESULT first=%d second=%d driver_allocs=%ld live=%llu\n", static_cast<int>(first),
              static_cast<int>(second), driver_calls("cuMemAllocManaged") - before, app_managed_stats().live_bytes);
  if (first == cudaSuccess) cudaFree(a);
  if (second == cudaSuccess) cudaFree(b);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string const what = argc > 1 ? argv[1] : "";
  if (what == "reuse") return reuse();
  if (what == "queries") return queries();
  if (what == "loop") return loop();
  if (what == "limit") return limit();
  if (what == "stats") return stats();
  if (what == "reset") return reset();
  std::fprintf(stderr, "usage: managed_app reuse|queries|loop|limit|stats|reset\n");
  return 1;
}
