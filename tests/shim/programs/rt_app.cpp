// Test program (a): linked against the toolkit's shared libcudart; at run time the
// simulated runtime (or a real one) is loaded. argv[1] picks the scenario; every
// scenario checks its own results and prints STATS for the gtest driver.

#include "app_support.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20U;

// Served: allocations and frees at the runtime level, sync and stream-ordered.
void served() {
  std::vector<void*> ps;
  for (std::size_t n : {256UL, 4096UL, 100000UL, MiB, 3 * MiB}) {
    void* p = nullptr;
    APP_CHECK_EQ(cudaMalloc(&p, n), cudaSuccess);
    APP_CHECK(p != nullptr);
    APP_CHECK_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0);
    ps.push_back(p);
  }
  cudaStream_t s = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  void* a = nullptr;
  APP_CHECK_EQ(cudaMallocAsync(&a, 8192, s), cudaSuccess);
  APP_CHECK_EQ(cudaMemsetAsync(a, 1, 8192, s), cudaSuccess);
  APP_CHECK_EQ(cudaFreeAsync(a, s), cudaSuccess);
  APP_CHECK_EQ(cudaStreamSynchronize(s), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
  for (void* p : ps) APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  void* pitched = nullptr;
  std::size_t pitch = 0;
  APP_CHECK_EQ(cudaMallocPitch(&pitched, &pitch, 100, 10), cudaSuccess);
  APP_CHECK_EQ(pitch, 512);
  APP_CHECK_EQ(cudaFree(pitched), cudaSuccess);
  if (!app_shim_active()) return;  // pass-through runs: the driver checks STATS
  auto const st = app_stats();
  APP_CHECK_EQ(st.chain_allocations, 7);
  APP_CHECK_EQ(st.runtime_allocations, 7);
  APP_CHECK_EQ(st.chain_frees, 7);
  APP_CHECK_EQ(st.live_allocations, 0);
}

// Results real CUDA gives (docs/cuda-semantics.md), and refused double frees.
void errors() {
  void* p = reinterpret_cast<void*>(1);
  APP_CHECK_EQ(cudaMalloc(&p, 0), cudaSuccess);
  APP_CHECK(p == nullptr);
  APP_CHECK_EQ(cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
  APP_CHECK_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  APP_CHECK_EQ(cudaMalloc(&p, std::size_t{1} << 62U), cudaErrorMemoryAllocation);
  APP_CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  APP_CHECK_EQ(cudaGetLastError(), cudaSuccess);
  // Each refused free is also the runtime's last error, read once.
  APP_CHECK_EQ(cudaFree(reinterpret_cast<void*>(0xdeadbeef00)), cudaErrorInvalidValue);
  APP_CHECK_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  void* q = nullptr;
  APP_CHECK_EQ(cudaMalloc(&q, 4096), cudaSuccess);
  APP_CHECK_EQ(cudaFree(static_cast<char*>(q) + 256), cudaErrorInvalidValue);  // interior
  APP_CHECK_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  APP_CHECK_EQ(cudaFree(q), cudaSuccess);
  APP_CHECK_EQ(cudaGetLastError(), cudaSuccess);
  APP_CHECK_EQ(cudaFree(q), cudaErrorInvalidValue);  // double
  APP_CHECK_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  APP_CHECK_EQ(cudaGetLastError(), cudaSuccess);
  APP_CHECK_EQ(cudaFreeAsync(q, nullptr), cudaErrorInvalidValue);  // double, other entry
  APP_CHECK_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  app_sim_reset_violations();  // the unknown and interior frees above were on purpose
  APP_CHECK_EQ(cudaMallocAsync(&p, 0, nullptr), cudaSuccess);
  APP_CHECK(p == nullptr);
  APP_CHECK_EQ(cudaFreeAsync(nullptr, nullptr), cudaSuccess);
  // The pool is intact: the freed block is handed out again and usable.
  void* r = nullptr;
  APP_CHECK_EQ(cudaMalloc(&r, 4096), cudaSuccess);
  APP_CHECK_EQ(cudaMemset(r, 7, 4096), cudaSuccess);
  APP_CHECK_EQ(cudaFree(r), cudaSuccess);
  std::size_t f = 0;
  std::size_t t = 0;
  APP_CHECK_EQ(cudaMemGetInfo(nullptr, &t), cudaSuccess);
  APP_CHECK_EQ(cudaMemGetInfo(&f, &t), cudaSuccess);
  APP_CHECK(f <= t && t > 0);
  APP_CHECK_EQ(cudaGetLastError(), cudaSuccess);
  if (!app_shim_active()) return;  // the same results from CUDA alone
  auto const st = app_stats();
  APP_CHECK_EQ(st.double_frees, 2);
  APP_CHECK_EQ(st.live_allocations, 0);
}

// Cross-API frees: async memory by cudaFree, runtime memory by cudaFreeAsync and
// by the driver's cuMemFree (found through cudaGetDriverEntryPoint), and back.
void cross() {
  using mem_free_fn = CUresult (*)(CUdeviceptr);
  using mem_alloc_fn = CUresult (*)(CUdeviceptr*, std::size_t);
  void* fp = nullptr;
  void* ap = nullptr;
  cudaDriverEntryPointQueryResult q{};
  APP_CHECK_EQ(cudaGetDriverEntryPoint("cuMemFree", &fp, cudaEnableDefault, &q), cudaSuccess);
  APP_CHECK_EQ(cudaGetDriverEntryPoint("cuMemAlloc", &ap, cudaEnableDefault, &q), cudaSuccess);
  APP_CHECK(fp != nullptr && ap != nullptr);
  // (d) the entry point handed out is the shim's: it serves from the chain.
  APP_CHECK(ap == dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
  auto const mem_free = reinterpret_cast<mem_free_fn>(fp);
  auto const mem_alloc = reinterpret_cast<mem_alloc_fn>(ap);

  cudaStream_t s = nullptr;
  APP_CHECK_EQ(cudaStreamCreate(&s), cudaSuccess);
  void* a = nullptr;
  APP_CHECK_EQ(cudaMallocAsync(&a, 4096, s), cudaSuccess);
  APP_CHECK_EQ(cudaFree(a), cudaSuccess);
  void* b = nullptr;
  APP_CHECK_EQ(cudaMalloc(&b, 4096), cudaSuccess);
  APP_CHECK_EQ(cudaFreeAsync(b, s), cudaSuccess);
  void* c = nullptr;
  APP_CHECK_EQ(cudaMalloc(&c, 4096), cudaSuccess);
  APP_CHECK_EQ(mem_free(reinterpret_cast<CUdeviceptr>(c)), CUDA_SUCCESS);
  APP_CHECK_EQ(mem_free(reinterpret_cast<CUdeviceptr>(c)), CUDA_ERROR_INVALID_VALUE);  // double
  CUdeviceptr d = 0;
  APP_CHECK_EQ(mem_alloc(&d, 4096), CUDA_SUCCESS);
  APP_CHECK_EQ(cudaFree(reinterpret_cast<void*>(d)), cudaSuccess);
  APP_CHECK_EQ(mem_alloc(&d, 0), CUDA_ERROR_INVALID_VALUE);
  // Managed memory comes from the managed chain and is freed by either level.
  void* m = nullptr;
  APP_CHECK_EQ(cudaMallocManaged(&m, 4096, cudaMemAttachGlobal), cudaSuccess);
  APP_CHECK_EQ(mem_free(reinterpret_cast<CUdeviceptr>(m)), CUDA_SUCCESS);
  APP_CHECK_EQ(mem_free(reinterpret_cast<CUdeviceptr>(m)), CUDA_ERROR_INVALID_VALUE);  // double
  APP_CHECK_EQ(cudaStreamSynchronize(s), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
  auto const st = app_stats();
  APP_CHECK_EQ(st.chain_allocations, 4);
  APP_CHECK_EQ(st.chain_frees, 4);
  APP_CHECK_EQ(st.passthrough_allocations, 0);
  APP_CHECK_EQ(st.double_frees, 2);
  APP_CHECK_EQ(st.live_allocations, 0);
  auto const ms = app_managed_stats();
  APP_CHECK_EQ(ms.allocations, 1);
  APP_CHECK_EQ(ms.frees, 1);
}

unsigned char g_marker = 0xAB;
void CUDART_CB late_write(void* user) {
  // Stands in for a kernel still using the block after the program freed it.
  std::memset(user, g_marker, 4096);
}

// Safe mode: a block cudaFree'd while queued work still uses it must not be
// handed out before that work ran.
void safe() {
  cudaStream_t s = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  APP_CHECK_EQ(cudaLaunchHostFunc(s, late_write, p), cudaSuccess);
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);  // real CUDA: returns after the host function ran
  void* q = nullptr;
  APP_CHECK_EQ(cudaMalloc(&q, 4096), cudaSuccess);
  APP_CHECK_EQ(cudaMemset(q, 0, 4096), cudaSuccess);
  APP_CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<unsigned char> host(4096, 1);
  APP_CHECK_EQ(cudaMemcpy(host.data(), q, 4096, cudaMemcpyDeviceToHost), cudaSuccess);
  bool intact = true;
  for (auto v : host) intact = intact && v == 0;
  APP_CHECK(intact);
  printf("REUSED %d\n", p == q ? 1 : 0);
  APP_CHECK_EQ(cudaFree(q), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// Capture: an allocation on the capturing stream passes through (graph memory), a
// pool growth in another thread keeps the capture valid.
void capture() {
  cudaStream_t s = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  void* warm = nullptr;
  APP_CHECK_EQ(cudaMalloc(&warm, 4096), cudaSuccess);  // the chain exists before the capture
  APP_CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  void* g = nullptr;
  APP_CHECK_EQ(cudaMallocAsync(&g, 4096, s), cudaSuccess);
  APP_CHECK_EQ(cudaFreeAsync(g, s), cudaSuccess);
  APP_CHECK_EQ(app_stats().active_captures, 1);
  void* big = nullptr;
  std::thread other([&] {
    // Grows the pool (an upstream cuMemAlloc) while the capture is active, and
    // frees with cudaFree semantics: no sync may happen now. In relaxed mode, as
    // PyTorch's allocator allocates during captures (in global mode CUDA refuses:
    // the capture_refusals scenario).
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    APP_CHECK_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
    APP_CHECK_EQ(cudaMalloc(&big, 64 * MiB), cudaSuccess);
    APP_CHECK_EQ(cudaFree(big), cudaSuccess);
    APP_CHECK_EQ(cudaFree(warm), cudaSuccess);
    APP_CHECK_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  });
  other.join();
  cudaGraph_t graph = nullptr;
  APP_CHECK_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  APP_CHECK(graph != nullptr);
  if (graph != nullptr) APP_CHECK_EQ(cudaGraphDestroy(graph), cudaSuccess);
  APP_CHECK_EQ(app_stats().active_captures, 0);
  // A capture ended by destroying its stream is no longer counted either.
  cudaStream_t c = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking), cudaSuccess);
  APP_CHECK_EQ(cudaStreamBeginCapture(c, cudaStreamCaptureModeRelaxed), cudaSuccess);
  APP_CHECK_EQ(app_stats().active_captures, 1);
  (void)cudaStreamDestroy(c);  // a program error CUDA answers; the sim counts it
  app_sim_reset_violations();
  APP_CHECK_EQ(app_stats().active_captures, 0);
  APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
  auto const st = app_stats();
  APP_CHECK_EQ(st.captured_passthroughs, 1);
  APP_CHECK_EQ(st.chain_allocations, 2);
  APP_CHECK_EQ(app_sim_violations(), 0);
}

// During a capture CUDA refuses cudaMalloc and cudaFree from a thread whose capture
// mode is not relaxed (its own capture, or a global one of another thread), and
// invalidates the capture. The shim leaves that answer to CUDA: served from the
// pool, the capture would go on, and memory it uses could be freed and handed out
// while the graph still writes there.
void capture_refusals() {
  cudaStream_t s = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  void* kept = nullptr;
  APP_CHECK_EQ(cudaMalloc(&kept, 4096), cudaSuccess);  // from the pool
  auto const served = app_stats().chain_allocations;
  cudaGraph_t g = nullptr;
  void* p = nullptr;
  // The capturing thread, global mode: refused, the capture invalidated.
  APP_CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  APP_CHECK_EQ(cudaMalloc(&p, 4096), cudaErrorStreamCaptureUnsupported);
  APP_CHECK_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  // A cudaFree of pooled memory there: refused; the block stays allocated.
  APP_CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  APP_CHECK_EQ(cudaFree(kept), cudaErrorStreamCaptureUnsupported);
  APP_CHECK_EQ(cudaPeekAtLastError(), cudaErrorStreamCaptureUnsupported);  // recorded, as CUDA records it
  APP_CHECK_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  // Another thread in global mode, during a global capture: refused too.
  APP_CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaError_t other = cudaSuccess;
  std::thread([&] {
    void* q = nullptr;
    other = cudaMalloc(&q, 4096);
  }).join();
  APP_CHECK_EQ(other, cudaErrorStreamCaptureUnsupported);
  APP_CHECK_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  // A thread-local capture: another thread may allocate and free (CUDA serves it).
  APP_CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  std::thread([&] {
    void* q = nullptr;
    other = cudaMalloc(&q, 4096);
    if (other == cudaSuccess) other = cudaFree(q);
  }).join();
  APP_CHECK_EQ(other, cudaSuccess);
  // The capturing thread in relaxed mode may: served by the pool.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  APP_CHECK_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  APP_CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  APP_CHECK_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  APP_CHECK_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  if (g != nullptr) APP_CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);
  if (app_shim_active()) APP_CHECK_EQ(app_stats().chain_allocations, served + 1);
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  APP_CHECK_EQ(cudaFree(kept), cudaSuccess);  // still allocated after its refused free
  APP_CHECK_EQ(app_stats().active_captures, 0);
  // The three refusals were CUDA's: each invalidated its capture (the simulated
  // device counts them).
  if (app_sim_calls("cuMemAlloc") >= 0) APP_CHECK_EQ(app_sim_violations(), 3);
  app_sim_reset_violations();
  APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// Two devices: one chain each; a pointer is freed by its own chain whatever device
// is current.
void devices() {
  int n = 0;
  APP_CHECK_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  APP_CHECK(n >= 2);
  void* p0 = nullptr;
  void* p1 = nullptr;
  APP_CHECK_EQ(cudaSetDevice(0), cudaSuccess);
  APP_CHECK_EQ(cudaMalloc(&p0, MiB), cudaSuccess);
  APP_CHECK_EQ(cudaSetDevice(1), cudaSuccess);
  APP_CHECK_EQ(cudaMalloc(&p1, MiB), cudaSuccess);
  cudaPointerAttributes attr{};
  APP_CHECK_EQ(cudaPointerGetAttributes(&attr, p0), cudaSuccess);
  APP_CHECK_EQ(attr.device, 0);
  APP_CHECK_EQ(cudaFree(p0), cudaSuccess);  // device 1 current
  APP_CHECK_EQ(cudaSetDevice(0), cudaSuccess);
  APP_CHECK_EQ(cudaFree(p1), cudaSuccess);
  auto const st = app_stats();
  APP_CHECK_EQ(st.chains, 2);
  APP_CHECK_EQ(st.chain_frees, 2);
  APP_CHECK_EQ(st.live_allocations, 0);
  // The reset drops device 0's chain and its books; a new one serves afterwards.
  void* leak = nullptr;
  APP_CHECK_EQ(cudaMalloc(&leak, MiB), cudaSuccess);
  APP_CHECK_EQ(cudaDeviceReset(), cudaSuccess);
  APP_CHECK_EQ(app_stats().chains, 1);
  APP_CHECK_EQ(app_stats().live_allocations, 0);
  // The pool's memory is mapped (cuMemCreate), which outlives contexts: the reset
  // must give it back as it frees cuMemAlloc's, the leaked block included.
  using live_bytes_fn = size_t (*)(int);
  if (auto live = reinterpret_cast<live_bytes_fn>(app_sim_symbol("gpumemsim_live_bytes"))) {
    APP_CHECK_EQ(live(0), 0U);
  }
  void* again = nullptr;
  APP_CHECK_EQ(cudaMalloc(&again, MiB), cudaSuccess);
  APP_CHECK_EQ(cudaFree(again), cudaSuccess);
  APP_CHECK_EQ(app_stats().chains, 2);
}

// A forked child starts clean.
void forked() {
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, MiB), cudaSuccess);
  APP_CHECK_EQ(app_stats().live_allocations, 1);
  pid_t const pid = fork();
  if (pid == 0) {
    auto const st = app_stats();
    int const clean = st.live_allocations == 0 && st.chains == 0 && st.chain_allocations == 0;
    _exit(clean ? 0 : 3);
  }
  int status = 0;
  APP_CHECK_EQ(waitpid(pid, &status, 0), pid);
  APP_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);
}

// cudaMemGetInfo agrees with the pool and the limit; pointer queries describe the
// allocation; IPC of a pooled block gets gpumem's handle.
void queries() {
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, 16 * MiB), cudaSuccess);
  std::size_t f = 0;
  std::size_t t = 0;
  APP_CHECK_EQ(cudaMemGetInfo(&f, &t), cudaSuccess);
  printf("MEMINFO free=%zu total=%zu\n", f, t);
  void* q = nullptr;
  APP_CHECK_EQ(cudaMalloc(&q, 4096), cudaSuccess);
  using range_fn = CUresult (*)(CUdeviceptr*, std::size_t*, CUdeviceptr);
  void* rp = nullptr;
  cudaDriverEntryPointQueryResult qr{};
  APP_CHECK_EQ(cudaGetDriverEntryPoint("cuMemGetAddressRange", &rp, cudaEnableDefault, &qr), cudaSuccess);
  CUdeviceptr base = 0;
  std::size_t size = 0;
  APP_CHECK_EQ(reinterpret_cast<range_fn>(rp)(&base, &size, reinterpret_cast<CUdeviceptr>(q) + 100), CUDA_SUCCESS);
  APP_CHECK_EQ(base, reinterpret_cast<CUdeviceptr>(q));
  APP_CHECK_EQ(size, 4096);
  // IPC shares the block itself: gpumem's handle, for a block inside a page and for
  // one that starts a page of mapped memory alike (multi_app opens them).
  cudaIpcMemHandle_t h{};
  APP_CHECK_EQ(cudaIpcGetMemHandle(&h, q), cudaSuccess);
  APP_CHECK(std::memcmp(&h, "gpumemI1", 8) == 0);
  void* paged = nullptr;
  APP_CHECK_EQ(cudaMalloc(&paged, 2 * MiB), cudaSuccess);
  APP_CHECK_EQ(reinterpret_cast<std::uintptr_t>(paged) % (2 * MiB), 0U);  // a growth's first page
  APP_CHECK_EQ(cudaIpcGetMemHandle(&h, paged), cudaSuccess);
  APP_CHECK(std::memcmp(&h, "gpumemI1", 8) == 0);
  APP_CHECK_EQ(app_stats().ipc_refused, 0);
  APP_CHECK_EQ(cudaFree(paged), cudaSuccess);
  APP_CHECK_EQ(cudaFree(q), cudaSuccess);
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);
}

// Many threads allocating and freeing at once (sync and stream-ordered, with frees
// crossing threads): every allocation served, registered and freed exactly once.
void threads() {
  constexpr int thread_count = 8;
  constexpr int rounds = 500;
  std::vector<std::vector<void*>> handed(thread_count);
  std::vector<std::thread> pool;
  for (int t = 0; t < thread_count; ++t) {
    pool.emplace_back([t, &handed] {
      cudaStream_t s = nullptr;
      APP_CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
      for (int i = 0; i < rounds; ++i) {
        std::size_t const n = 256U << static_cast<unsigned>((t + i) % 12);
        void* p = nullptr;
        if (i % 2 == 0) {
          APP_CHECK_EQ(cudaMalloc(&p, n), cudaSuccess);
        } else {
          APP_CHECK_EQ(cudaMallocAsync(&p, n, s), cudaSuccess);
        }
        if (i % 3 == 0) {
          handed[static_cast<std::size_t>(t)].push_back(p);  // freed later by another thread
        } else if (i % 2 == 0) {
          APP_CHECK_EQ(cudaFree(p), cudaSuccess);
        } else {
          APP_CHECK_EQ(cudaFreeAsync(p, s), cudaSuccess);
        }
      }
      APP_CHECK_EQ(cudaStreamSynchronize(s), cudaSuccess);
      APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
    });
  }
  for (auto& th : pool) th.join();
  pool.clear();
  for (int t = 0; t < thread_count; ++t) {
    pool.emplace_back([t, &handed] {
      for (void* p : handed[static_cast<std::size_t>((t + 1) % thread_count)]) APP_CHECK_EQ(cudaFree(p), cudaSuccess);
    });
  }
  for (auto& th : pool) th.join();
  auto const st = app_stats();
  APP_CHECK_EQ(st.chain_allocations, thread_count * rounds);
  APP_CHECK_EQ(st.chain_frees, thread_count * rounds);
  APP_CHECK_EQ(st.double_frees, 0);
  APP_CHECK_EQ(st.live_allocations, 0);
}

// 8 threads, each allocating and freeing many times at once, whatever the answer:
// prints how many allocations succeeded and failed (a chain that cannot be built
// must be said once, not once a call).
void churn() {
  constexpr int thread_count = 8;
  constexpr int rounds = 500;
  std::atomic<long> served{0}, failed{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < thread_count; ++t) {
    pool.emplace_back([&served, &failed] {
      for (int i = 0; i < rounds; ++i) {
        void* p = nullptr;
        if (cudaMalloc(&p, 4096) == cudaSuccess) {
          served.fetch_add(1);
          APP_CHECK_EQ(cudaFree(p), cudaSuccess);
        } else {
          failed.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  std::printf("SERVED %ld FAILED %ld\n", served.load(), failed.load());
}

// "<what> DEVICE d FREE f TOTAL t": the device memory the simulated device has handed
// out, and what cudaMemGetInfo says.
void print_device_memory(char const* what) {
  std::size_t free = 0;
  std::size_t total = 0;
  APP_CHECK_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  std::printf("%s DEVICE %zu FREE %zu TOTAL %zu\n", what, app_sim_device_bytes(0), free, total);
}

// 64 threads each allocate argv[2] bytes at a time, all starting together, and keep
// what they got until every thread has failed once: under a limit, the
// out-of-memory message counts what the program held then. Prints the most held.
void oom_threads(std::size_t bytes) {
  constexpr int thread_count = 64;
  std::atomic<int> ready{0}, done{0};
  std::atomic<bool> measured{false};
  std::atomic<long> held{0}, most{0};
  std::vector<std::vector<void*>> kept(thread_count);
  std::vector<std::thread> pool;
  for (int t = 0; t < thread_count; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < thread_count) std::this_thread::yield();
      for (;;) {
        void* p = nullptr;
        if (cudaMalloc(&p, bytes) != cudaSuccess) break;
        kept[static_cast<std::size_t>(t)].push_back(p);
        long const now = held.fetch_add(static_cast<long>(bytes)) + static_cast<long>(bytes);
        long seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {}
      }
      done.fetch_add(1);
      while (done.load() < thread_count) std::this_thread::yield();
      if (t == 0) {
        print_device_memory("AT_OOM");
        measured.store(true);
      }
      while (!measured.load()) std::this_thread::yield();
      for (void* p : kept[static_cast<std::size_t>(t)]) APP_CHECK_EQ(cudaFree(p), cudaSuccess);
    });
  }
  for (auto& th : pool) th.join();
  std::printf("MOST_HELD %ld\n", most.load());
}

// A fragmented pool under a limit: 2 MiB blocks until the limit refuses one, every
// other one freed (holes no larger request fits), then 6 MiB blocks until refused.
// The pool must move the holes' device memory to where the 6 MiB blocks go rather
// than hold more than the limit. Prints what was held and what the device gave.
void oom_fragmented() {
  constexpr std::size_t page = std::size_t{2} << 20;
  std::vector<void*> small;
  std::vector<void*> big;
  for (void* p = nullptr; cudaMalloc(&p, page) == cudaSuccess;) small.push_back(p);
  std::size_t held = 0;
  for (std::size_t i = 0; i < small.size(); ++i) {
    if (i % 2 == 1) {
      APP_CHECK_EQ(cudaFree(small[i]), cudaSuccess);
      small[i] = nullptr;
    } else {
      held += page;
    }
  }
  for (void* p = nullptr; cudaMalloc(&p, 3 * page) == cudaSuccess;) {
    big.push_back(p);
    held += 3 * page;
  }
  std::printf("SMALL %zu BIG %zu HELD %zu\n", small.size(), big.size(), held);
  print_device_memory("AT_OOM");
  for (void* p : small) {
    if (p != nullptr) APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  }
  for (void* p : big) APP_CHECK_EQ(cudaFree(p), cudaSuccess);
}

// cudaMallocFromPoolAsync: the device's default pool is served by the chain, a pool
// the program made keeps its properties (CUDA serves it); managed memory comes from
// the managed chain; all freed by whichever entry point.
void pools() {
  cudaStream_t s = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaMemPool_t def = nullptr;
  APP_CHECK_EQ(cudaDeviceGetDefaultMemPool(&def, 0), cudaSuccess);
  void* a = nullptr;
  APP_CHECK_EQ(cudaMallocFromPoolAsync(&a, 4096, def, s), cudaSuccess);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t own = nullptr;
  APP_CHECK_EQ(cudaMemPoolCreate(&own, &props), cudaSuccess);
  void* b = nullptr;
  APP_CHECK_EQ(cudaMallocFromPoolAsync(&b, 4096, own, s), cudaSuccess);
  void* m = nullptr;
  APP_CHECK_EQ(cudaMallocManaged(&m, 4096, cudaMemAttachGlobal), cudaSuccess);
  auto st = app_stats();
  APP_CHECK_EQ(st.chain_allocations, 1);
  APP_CHECK_EQ(st.passthrough_allocations, 1);
  APP_CHECK_EQ(st.live_allocations, 3);
  APP_CHECK_EQ(app_managed_stats().allocations, 1);
  APP_CHECK_EQ(cudaFreeAsync(a, s), cudaSuccess);
  APP_CHECK_EQ(cudaFreeAsync(b, s), cudaSuccess);
  APP_CHECK_EQ(cudaFree(m), cudaSuccess);
  APP_CHECK_EQ(cudaStreamSynchronize(s), cudaSuccess);
  APP_CHECK_EQ(cudaMemPoolDestroy(own), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
  st = app_stats();
  APP_CHECK_EQ(st.chain_frees, 1);
  APP_CHECK_EQ(st.passthrough_frees, 1);
  APP_CHECK_EQ(st.live_allocations, 0);
  APP_CHECK_EQ(app_managed_stats().frees, 1);
}

// Leaves allocations behind for the --report test.
void leak() {
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, 3 * MiB), cudaSuccess);
  APP_CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
}

// Logs a known number of events, then dies the way argv[2] says (kill, segv,
// abort) without any chance to flush: the log must still hold every row.
// 40 allocations, 20 frees, 1 failed allocation = 61 rows.
[[noreturn]] void die(std::string const& how) {
  std::vector<void*> ps(40);
  for (std::size_t i = 0; i < ps.size(); ++i) APP_CHECK_EQ(cudaMalloc(&ps[i], 4096 * (i + 1)), cudaSuccess);
  for (std::size_t i = 0; i < ps.size(); i += 2) APP_CHECK_EQ(cudaFree(ps[i]), cudaSuccess);
  void* huge = nullptr;
  APP_CHECK_EQ(cudaMalloc(&huge, std::size_t{1} << 62U), cudaErrorMemoryAllocation);
  std::printf("EVENTS 61\n");
  std::fflush(stdout);
  if (how == "kill") kill(getpid(), SIGKILL);
  if (how == "segv") {
    volatile int* bad = nullptr;
    *bad = 1;  // a real segmentation fault, not raise(): no handler runs first
  }
  std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  std::string const scenario = argc > 1 ? argv[1] : "served";
  if (scenario == "served")
    served();
  else if (scenario == "errors")
    errors();
  else if (scenario == "cross")
    cross();
  else if (scenario == "safe")
    safe();
  else if (scenario == "capture")
    capture();
  else if (scenario == "capture-refusals")
    capture_refusals();
  else if (scenario == "devices")
    devices();
  else if (scenario == "fork")
    forked();
  else if (scenario == "queries")
    queries();
  else if (scenario == "leak")
    leak();
  else if (scenario == "threads")
    threads();
  else if (scenario == "churn")
    churn();
  else if (scenario == "oom-threads" && argc > 2)
    oom_threads(std::strtoull(argv[2], nullptr, 10));
  else if (scenario == "oom-fragmented")
    oom_fragmented();
  else if (scenario == "pools")
    pools();
  else if (scenario == "die")
    die(argc > 2 ? argv[2] : "abort");
  else {
    fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  }
  return app_finish(scenario.c_str());
}
