// Pinned host memory under the shim (host_memory_test.cpp): prints one RESULT line
// of key=value pairs per scenario.
//   reuse  a copy queued into a block, the block freed, a new one allocated and
//          written: the late copy must not land in it
//   flags  flag sets, pointer queries on an interior pointer, a second free
//   loop   50 allocate/free pairs; how many reached the driver
//   limit  two 600 KiB blocks (run with GPUMEM_HOST_LIMIT=1MiB)
//   stats  the query API's host counters (gpumem_shim_get_host_stats), in the
//          process and in a forked child (which starts without a host chain)
//   created  pinned memory allocated with the primary context current, then while
//          a context the program created is (it dies with that context, so CUDA
//          must serve it)

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../../src/shim/gpumem_shim.h"

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
  if (cudaHostAlloc(&a, n, cudaHostAllocDefault) != cudaSuccess) return 3;
  if (cudaMemcpyAsync(a, dev, n, cudaMemcpyDeviceToHost, s) != cudaSuccess) return 4;
  if (cudaFreeHost(a) != cudaSuccess) return 5;
  if (cudaHostAlloc(&b, n, cudaHostAllocDefault) != cudaSuccess) return 6;
  std::memset(b, 0x11, n);
  if (cudaStreamSynchronize(s) != cudaSuccess) return 7;
  bool const intact = all_bytes(b, n, 0x11);
  // Once the device is idle, the freed block comes back.
  if (cudaDeviceSynchronize() != cudaSuccess) return 10;
  if (cudaHostAlloc(&c, n, cudaHostAllocDefault) != cudaSuccess) return 8;
  std::printf("RESULT same=%d intact=%d reused_after=%d\n", a == b ? 1 : 0, intact ? 1 : 0, c == a ? 1 : 0);
  if (cudaFreeHost(b) != cudaSuccess || cudaFreeHost(c) != cudaSuccess) return 9;
  cudaStreamDestroy(s);
  cudaFree(dev);
  return 0;
}

int flags() {
  void* m = nullptr;
  unsigned const mapped = cudaHostAllocMapped | cudaHostAllocPortable;
  if (cudaHostAlloc(&m, 10000, mapped) != cudaSuccess) return 2;
  char* interior = static_cast<char*>(m) + 5000;
  unsigned f = 0;
  if (cudaHostGetFlags(&f, interior) != cudaSuccess) return 3;
  void* d = nullptr;
  if (cudaHostGetDevicePointer(&d, interior, 0) != cudaSuccess) return 4;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, interior) != cudaSuccess) return 5;
  if (cudaFreeHost(m) != cudaSuccess) return 6;
  void* x = nullptr;
  if (cudaMallocHost(&x, 10000) != cudaSuccess) return 7;
  unsigned fx = 99;
  if (cudaHostGetFlags(&fx, x) != cudaSuccess) return 8;
  cudaError_t const twice = [&] {
    (void)cudaFreeHost(x);
    return cudaFreeHost(x);
  }();
  (void)cudaGetLastError();
  std::printf("RESULT flags=%u dptr=%d type_host=%d other_set=%d plain_flags=%u second_free=%d\n", f,
              d == interior ? 1 : 0, attr.type == cudaMemoryTypeHost ? 1 : 0, x != m ? 1 : 0, fx,
              static_cast<int>(twice));
  return 0;
}

int loop() {
  if (cudaFree(nullptr) != cudaSuccess) return 5;  // the runtime loads the driver on its first call
  long const before = driver_calls("cuMemHostAlloc");
  for (int i = 0; i < 50; ++i) {
    void* p = nullptr;
    if (cudaHostAlloc(&p, 1 << 20, cudaHostAllocDefault) != cudaSuccess) return 2;
    static_cast<char*>(p)[0] = 1;
    if (cudaFreeHost(p) != cudaSuccess) return 3;
    if (cudaDeviceSynchronize() != cudaSuccess) return 4;
  }
  std::printf("RESULT driver_allocs=%ld\n", driver_calls("cuMemHostAlloc") - before);
  return 0;
}

int limit() {
  void* a = nullptr;
  void* b = nullptr;
  cudaError_t const first = cudaMallocHost(&a, 600 << 10);
  cudaError_t const second = cudaMallocHost(&b, 600 << 10);
  (void)cudaGetLastError();
  std::printf("RESULT first=%d second=%d\n", static_cast<int>(first), static_cast<int>(second));
  if (first == cudaSuccess) cudaFreeHost(a);
  if (second == cudaSuccess) cudaFreeHost(b);
  return 0;
}

gpumem_shim_host_stats host_stats() {
  using fn = int (*)(gpumem_shim_host_stats*);
  gpumem_shim_host_stats s{};
  if (auto const f = reinterpret_cast<fn>(dlsym(RTLD_DEFAULT, "gpumem_shim_get_host_stats"))) f(&s);
  return s;
}

int stats() {
  gpumem_shim_host_stats const none = host_stats();
  void* a = nullptr;
  void* b = nullptr;
  if (cudaHostAlloc(&a, 100 << 10, cudaHostAllocDefault) != cudaSuccess) return 2;
  if (cudaMallocHost(&b, 1 << 20) != cudaSuccess) return 2;
  if (cudaFreeHost(a) != cudaSuccess) return 3;
  gpumem_shim_host_stats const s = host_stats();
  pid_t const pid = fork();
  if (pid == 0) _exit(host_stats().built == 0 && host_stats().allocations == 0 ? 0 : 7);
  int status = 0;
  int const child_clean = waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (cudaFreeHost(b) != cudaSuccess) return 3;
  std::printf(
      "RESULT before=%d built=%d pooled=%d allocations=%llu frees=%llu live=%llu reserved_ge_live=%d "
      "child_clean=%d\n",
      none.built, s.built, s.pooled, s.allocations, s.frees, s.live_bytes, s.reserved_bytes >= s.live_bytes ? 1 : 0,
      child_clean);
  return 0;
}

int created() {
  if (cudaFree(nullptr) != cudaSuccess) return 5;  // the primary context, current
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  using create_fn = CUresult (*)(CUcontext*, void*, unsigned, CUdevice);
  using ctx_fn = CUresult (*)(CUcontext);
  using pop_fn = CUresult (*)(CUcontext*);
  using host_alloc_fn = CUresult (*)(void**, std::size_t, unsigned);
  using free_host_fn = CUresult (*)(void*);
  auto const create = reinterpret_cast<create_fn>(dlsym(lib, "cuCtxCreate_v4"));
  auto const destroy = reinterpret_cast<ctx_fn>(dlsym(lib, "cuCtxDestroy_v2"));
  auto const pop = reinterpret_cast<pop_fn>(dlsym(lib, "cuCtxPopCurrent_v2"));
  auto const host_alloc = reinterpret_cast<host_alloc_fn>(dlsym(lib, "cuMemHostAlloc"));
  auto const free_host = reinterpret_cast<free_host_fn>(dlsym(lib, "cuMemFreeHost"));
  if (create == nullptr || destroy == nullptr || pop == nullptr || host_alloc == nullptr || free_host == nullptr)
    return 6;
  void* p = nullptr;
  CUresult const in_primary = host_alloc(&p, 4096, 0);  // the host chain is built now
  if (in_primary == CUDA_SUCCESS) free_host(p);
  CUcontext ctx = nullptr;
  if (create(&ctx, nullptr, 0, 0) != CUDA_SUCCESS) return 7;  // pushed: current now
  gpumem_shim_host_stats const before = host_stats();
  CUresult const in_created = host_alloc(&p, 4096, 0);
  CUresult const freed = in_created == CUDA_SUCCESS ? free_host(p) : in_created;
  gpumem_shim_host_stats const after = host_stats();
  CUcontext popped = nullptr;
  if (pop(&popped) != CUDA_SUCCESS || destroy(ctx) != CUDA_SUCCESS) return 8;
  std::printf("RESULT primary=%d served_first=%llu created=%d freed=%d passed_to_cuda=%llu served=%llu\n",
              static_cast<int>(in_primary), before.allocations, static_cast<int>(in_created), static_cast<int>(freed),
              after.passthroughs - before.passthroughs, after.allocations - before.allocations);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string const what = argc > 1 ? argv[1] : "";
  if (what == "reuse") return reuse();
  if (what == "flags") return flags();
  if (what == "loop") return loop();
  if (what == "limit") return limit();
  if (what == "stats") return stats();
  if (what == "created") return created();
  std::fprintf(stderr, "usage: host_app reuse|flags|loop|limit|stats|created\n");
  return 1;
}
