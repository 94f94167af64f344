// Test program: the promises of safe mode (docs/cuda-semantics.md, "What a program
// may rely on"), each in a scenario, as an unmodified program relies on them through
// the shared runtime and the driver API. Host functions stand in for kernels
// (tests/support/ordering_probe.hpp): work that runs on a block after the block's
// next owner's work is a violation. The driver (safe_mode_test.cpp) checks the
// PROBE line: none in safe mode; stream mode, which trusts stream order, shows why
// safe mode is the default.
//
// Run with GPUMEM_POOL_SIZE=1MiB GPUMEM_POOL_MAX=1MiB so every reuse is forced.

#include "app_support.h"

#include <support/ordering_probe.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

gpumem::test::ordering_probe probe{reinterpret_cast<gpumem::test::ordering_probe::launch_fn>(&cudaLaunchHostFunc)};

cudaStream_t make_stream() {
  cudaStream_t s = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  return s;
}

void use(cudaStream_t s, void* p, std::size_t n, std::uint64_t generation) {
  APP_CHECK_EQ(probe.touch(reinterpret_cast<CUstream>(s), p, n, generation), CUDA_SUCCESS);
}

template <class F>
F driver_entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  APP_CHECK_EQ(cudaGetDriverEntryPointByVersion(name, &fn, 13000, cudaEnableDefault, &status), cudaSuccess);
  return reinterpret_cast<F>(fn);
}

// cudaMalloc's memory may be used at once on any stream: even when it reuses memory
// another stream freed in stream order with its work still queued.
void malloc_any_stream() {
  cudaStream_t n1 = make_stream();
  cudaStream_t n2 = make_stream();
  void* p = nullptr;
  APP_CHECK_EQ(cudaMallocAsync(&p, 512 * KiB, n1), cudaSuccess);
  use(n1, p, 512 * KiB, probe.next_generation());
  APP_CHECK_EQ(cudaFreeAsync(p, n1), cudaSuccess);
  void* q = nullptr;
  APP_CHECK_EQ(cudaMalloc(&q, MiB), cudaSuccess);  // the whole pool: p's memory
  printf("REUSED %d\n", p == q ? 1 : 0);
  use(n2, q, MiB, probe.next_generation());
  APP_CHECK_EQ(cudaStreamSynchronize(n2), cudaSuccess);
  APP_CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  APP_CHECK_EQ(cudaFree(q), cudaSuccess);
  for (auto s : {n1, n2}) APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// After cudaFree returns, work queued before it on any stream counts as finished.
void free_then_reuse() {
  cudaStream_t n1 = make_stream();
  cudaStream_t n2 = make_stream();
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, MiB), cudaSuccess);
  use(n1, p, MiB, probe.next_generation());  // a kernel still running at the free
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  void* q = nullptr;
  APP_CHECK_EQ(cudaMalloc(&q, MiB), cudaSuccess);
  printf("REUSED %d\n", p == q ? 1 : 0);
  auto const g = probe.next_generation();
  use(n2, q, MiB, g);
  APP_CHECK_EQ(cudaStreamSynchronize(n2), cudaSuccess);
  // A stream created after the reuse must not overtake the old work either.
  use(n1, q, MiB, g);  // q's owner queues more work, then frees q
  APP_CHECK_EQ(cudaFree(q), cudaSuccess);
  void* r = nullptr;
  APP_CHECK_EQ(cudaMalloc(&r, MiB), cudaSuccess);
  cudaStream_t n3 = make_stream();
  use(n3, r, MiB, probe.next_generation());
  APP_CHECK_EQ(cudaStreamSynchronize(n3), cudaSuccess);
  APP_CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  APP_CHECK_EQ(cudaFree(r), cudaSuccess);
  for (auto s : {n1, n2, n3}) APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// Every cross-family free keeps the stronger promise: cudaFree of async memory and
// cudaFreeAsync of cudaMalloc memory, runtime and driver spellings.
void cross_family() {
  cudaStream_t n1 = make_stream();
  cudaStream_t n2 = make_stream();
  using alloc_fn = CUresult (*)(CUdeviceptr*, std::size_t);
  using free_fn = CUresult (*)(CUdeviceptr);
  using alloc_async_fn = CUresult (*)(CUdeviceptr*, std::size_t, CUstream);
  using free_async_fn = CUresult (*)(CUdeviceptr, CUstream);
  auto const cu_alloc = driver_entry<alloc_fn>("cuMemAlloc");
  auto const cu_free = driver_entry<free_fn>("cuMemFree");
  auto const cu_alloc_async = driver_entry<alloc_async_fn>("cuMemAllocAsync");
  auto const cu_free_async = driver_entry<free_async_fn>("cuMemFreeAsync");
  for (int round = 0; round < 4; ++round) {
    // Allocate one way, use on n1 (work stays queued), free the other way; then the
    // next owner uses it on n2 (stream-ordered) or anywhere (synchronous).
    void* p = nullptr;
    bool const sync_alloc = round % 2 == 0;
    bool const driver = round >= 2;
    if (sync_alloc) {
      if (driver) {
        CUdeviceptr d = 0;
        APP_CHECK_EQ(cu_alloc(&d, MiB), CUDA_SUCCESS);
        p = reinterpret_cast<void*>(d);
      } else {
        APP_CHECK_EQ(cudaMalloc(&p, MiB), cudaSuccess);
      }
    } else if (driver) {
      CUdeviceptr d = 0;
      APP_CHECK_EQ(cu_alloc_async(&d, MiB, reinterpret_cast<CUstream>(n1)), CUDA_SUCCESS);
      p = reinterpret_cast<void*>(d);
    } else {
      APP_CHECK_EQ(cudaMallocAsync(&p, MiB, n1), cudaSuccess);
    }
    use(n1, p, MiB, probe.next_generation());
    if (sync_alloc) {  // cudaMalloc memory freed in stream order on n1
      if (driver) {
        APP_CHECK_EQ(cu_free_async(reinterpret_cast<CUdeviceptr>(p), reinterpret_cast<CUstream>(n1)), CUDA_SUCCESS);
      } else {
        APP_CHECK_EQ(cudaFreeAsync(p, n1), cudaSuccess);
      }
    } else if (driver) {  // stream-ordered memory freed with cudaFree semantics
      APP_CHECK_EQ(cu_free(reinterpret_cast<CUdeviceptr>(p)), CUDA_SUCCESS);
    } else {
      APP_CHECK_EQ(cudaFree(p), cudaSuccess);
    }
    void* q = nullptr;
    APP_CHECK_EQ(cudaMallocAsync(&q, MiB, n2), cudaSuccess);
    use(n2, q, MiB, probe.next_generation());
    APP_CHECK_EQ(cudaStreamSynchronize(n2), cudaSuccess);
    APP_CHECK_EQ(cudaFreeAsync(q, n2), cudaSuccess);
    APP_CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  for (auto s : {n1, n2}) APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// Eight threads, a non-blocking stream each plus their per-thread default streams,
// both families, frees of other threads' blocks, work queued at every free.
void threads() {
  constexpr int count = 8;
  std::vector<cudaStream_t> streams;
  for (int t = 0; t < count; ++t) streams.push_back(make_stream());
  struct block {
    void* p;
    std::size_t n;
    bool synchronous;
  };
  std::mutex handoff_mutex;
  std::deque<block> handoff;
  std::atomic<long> oom{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < count; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng{static_cast<unsigned>(11 + t)};
      std::uniform_int_distribution<std::size_t> size{256, 32 * KiB};
      std::uniform_int_distribution<int> pick{0, 99};
      std::uniform_int_distribution<int> other{0, count - 1};
      cudaStream_t const own = pick(rng) < 25 ? cudaStreamPerThread : streams[static_cast<std::size_t>(t)];
      std::vector<block> live;
      for (int i = 0; i < 400; ++i) {
        int const a = pick(rng);
        if ((a < 45 && live.size() < 6) || live.empty()) {
          bool const sync = pick(rng) < 50;
          std::size_t const n = size(rng);
          void* p = nullptr;
          cudaError_t const e = sync ? cudaMalloc(&p, n) : cudaMallocAsync(&p, n, own);
          if (e == cudaErrorMemoryAllocation) {
            oom.fetch_add(1);
            (void)cudaGetLastError();
            APP_CHECK_EQ(cudaStreamSynchronize(own), cudaSuccess);
            continue;
          }
          APP_CHECK_EQ(e, cudaSuccess);
          auto const g = probe.next_generation();
          use(sync ? streams[static_cast<std::size_t>(other(rng))] : own, p, n, g);
          if (sync && pick(rng) < 50) use(own, p, n, g);
          live.push_back({p, n, sync});
        } else if (a < 85) {
          std::size_t const k = static_cast<std::size_t>(pick(rng)) % live.size();
          block const b = live[k];
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
          if (b.synchronous && pick(rng) < 30) {
            std::lock_guard lock{handoff_mutex};
            handoff.push_back(b);
          } else if (b.synchronous && pick(rng) < 70) {
            APP_CHECK_EQ(cudaFree(b.p), cudaSuccess);
          } else {
            APP_CHECK_EQ(cudaFreeAsync(b.p, own), cudaSuccess);
          }
        } else if (a < 95) {
          block b{};
          {
            std::lock_guard lock{handoff_mutex};
            if (handoff.empty()) continue;
            b = handoff.front();
            handoff.pop_front();
          }
          APP_CHECK_EQ(cudaFree(b.p), cudaSuccess);
        } else {
          APP_CHECK_EQ(cudaStreamSynchronize(own), cudaSuccess);
        }
      }
      for (auto const& b : live) APP_CHECK_EQ(cudaFree(b.p), cudaSuccess);
    });
  }
  for (auto& w : workers) w.join();
  for (auto const& b : handoff) APP_CHECK_EQ(cudaFree(b.p), cudaSuccess);
  APP_CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  printf("OOM %ld\n", oom.load());
  for (auto s : streams) APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// Stream-ordered calls on a destroyed or made-up stream get CUDA's error, and a
// refused free leaves the pointer allocated for a later, valid free.
void bad_streams() {
  cudaStream_t good = make_stream();
  cudaStream_t gone = make_stream();
  APP_CHECK_EQ(cudaStreamDestroy(gone), cudaSuccess);
  auto* const garbage = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x7e57ab1e00});
  for (cudaStream_t bad : {gone, garbage}) {
    void* p = reinterpret_cast<void*>(1);
    APP_CHECK_EQ(cudaMallocAsync(&p, 4096, bad), cudaErrorInvalidResourceHandle);
    APP_CHECK_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    void* q = nullptr;
    APP_CHECK_EQ(cudaMallocAsync(&q, 4096, good), cudaSuccess);
    APP_CHECK_EQ(cudaFreeAsync(q, bad), cudaErrorInvalidResourceHandle);
    APP_CHECK_EQ(cudaFree(q), cudaSuccess);            // still allocated: no double free
    APP_CHECK_EQ(cudaFree(q), cudaErrorInvalidValue);  // now it is one
  }
  using free_async_fn = CUresult (*)(CUdeviceptr, CUstream);
  using alloc_async_fn = CUresult (*)(CUdeviceptr*, std::size_t, CUstream);
  auto const cu_free_async = driver_entry<free_async_fn>("cuMemFreeAsync");
  auto const cu_alloc_async = driver_entry<alloc_async_fn>("cuMemAllocAsync");
  CUdeviceptr d = 0;
  APP_CHECK_EQ(cu_alloc_async(&d, 4096, reinterpret_cast<CUstream>(gone)), CUDA_ERROR_INVALID_HANDLE);
  APP_CHECK_EQ(cu_alloc_async(&d, 4096, reinterpret_cast<CUstream>(good)), CUDA_SUCCESS);
  APP_CHECK_EQ(cu_free_async(d, reinterpret_cast<CUstream>(gone)), CUDA_ERROR_INVALID_HANDLE);
  APP_CHECK_EQ(cu_free_async(d, reinterpret_cast<CUstream>(good)), CUDA_SUCCESS);
  APP_CHECK_EQ(cudaStreamSynchronize(good), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(good), cudaSuccess);
}

// A second free long after the first (the shim's record of the first is gone) of a
// block at the start of a pool slab: CUDA would free the whole slab if it got it.
void stale_double_free() {
  void* first = nullptr;
  APP_CHECK_EQ(cudaMalloc(&first, 256), cudaSuccess);
  std::vector<void*> others(12000, nullptr);  // more distinct frees than the registry remembers
  for (auto& q : others) APP_CHECK_EQ(cudaMalloc(&q, 256), cudaSuccess);
  APP_CHECK_EQ(cudaFree(first), cudaSuccess);
  for (auto q : others) APP_CHECK_EQ(cudaFree(q), cudaSuccess);
  APP_CHECK_EQ(cudaFree(first), cudaErrorInvalidValue);  // refused, never handed to CUDA
  // The pool is intact: its memory is still there and usable.
  void* again = nullptr;
  APP_CHECK_EQ(cudaMalloc(&again, 256), cudaSuccess);
  APP_CHECK_EQ(cudaMemset(again, 1, 256), cudaSuccess);
  APP_CHECK_EQ(cudaFree(again), cudaSuccess);
}

}  // namespace

// Work in a green context (a share of the SMs that uses the primary context's
// memory) on cudaMalloc memory freed while that work is still queued: the next
// owner's work must not overtake it, whichever stream of the green context it is
// on (one of cuGreenCtxStreamCreate, a blocking one made while the green context is
// current, its default stream, one destroyed right after its work was queued, the
// default stream of a green context destroyed the same way); and a green context
// made after the reuse must not overtake the previous owner's work either.
// Prints "USES n": every queued use must have run by the end (PROBE ran).
void green_contexts() {
  auto const get_resource = driver_entry<decltype(&cuDeviceGetDevResource)>("cuDeviceGetDevResource");
  auto const split = driver_entry<decltype(&cuDevSmResourceSplitByCount)>("cuDevSmResourceSplitByCount");
  auto const make_desc = driver_entry<decltype(&cuDevResourceGenerateDesc)>("cuDevResourceGenerateDesc");
  auto const green_create = driver_entry<decltype(&cuGreenCtxCreate)>("cuGreenCtxCreate");
  auto const green_destroy = driver_entry<decltype(&cuGreenCtxDestroy)>("cuGreenCtxDestroy");
  auto const to_ctx = driver_entry<decltype(&cuCtxFromGreenCtx)>("cuCtxFromGreenCtx");
  auto const green_stream = driver_entry<decltype(&cuGreenCtxStreamCreate)>("cuGreenCtxStreamCreate");
  auto const set_current = driver_entry<decltype(&cuCtxSetCurrent)>("cuCtxSetCurrent");
  auto const get_current = driver_entry<decltype(&cuCtxGetCurrent)>("cuCtxGetCurrent");
  auto const stream_create = driver_entry<decltype(&cuStreamCreate)>("cuStreamCreate");
  auto const stream_destroy = driver_entry<decltype(&cuStreamDestroy)>("cuStreamDestroy");
  auto const ctx_sync = driver_entry<decltype(&cuCtxSynchronize)>("cuCtxSynchronize");
  APP_CHECK_EQ(cudaFree(nullptr), cudaSuccess);
  CUcontext primary = nullptr;
  APP_CHECK_EQ(get_current(&primary), CUDA_SUCCESS);
  auto const make_green = [&] {
    CUdevResource sms{};
    CUdevResource part{};
    unsigned groups = 1;
    CUdevResourceDesc desc = nullptr;
    CUgreenCtx g = nullptr;
    APP_CHECK_EQ(get_resource(0, &sms, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
    APP_CHECK_EQ(split(&part, &groups, &sms, nullptr, 0, sms.sm.smCount / 2), CUDA_SUCCESS);
    APP_CHECK_EQ(make_desc(&desc, &part, 1), CUDA_SUCCESS);
    APP_CHECK_EQ(green_create(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS);
    return g;
  };
  auto const context_of = [&](CUgreenCtx g) {
    CUcontext c = nullptr;
    APP_CHECK_EQ(to_ctx(&c, g), CUDA_SUCCESS);
    return c;
  };
  CUgreenCtx const green = make_green();
  CUcontext const green_ctx = context_of(green);
  CUstream gs = nullptr;
  APP_CHECK_EQ(green_stream(&gs, green, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
  CUstream blocking = nullptr;
  APP_CHECK_EQ(set_current(green_ctx), CUDA_SUCCESS);
  APP_CHECK_EQ(stream_create(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
  APP_CHECK_EQ(set_current(primary), CUDA_SUCCESS);
  cudaStream_t n1 = make_stream();
  cudaStream_t n2 = make_stream();
  int uses = 0;
  int reused = 0;
  // One round: the old owner's work (queued by `old_work`), the free at once, the
  // reuse and the new owner's work on n2.
  auto const round = [&](auto&& old_work) {
    void* p = nullptr;
    APP_CHECK_EQ(cudaMalloc(&p, MiB), cudaSuccess);
    old_work(p);
    ++uses;
    APP_CHECK_EQ(cudaFree(p), cudaSuccess);
    void* q = nullptr;
    APP_CHECK_EQ(cudaMalloc(&q, MiB), cudaSuccess);
    reused += p == q ? 1 : 0;
    use(n2, q, MiB, probe.next_generation());
    ++uses;
    APP_CHECK_EQ(cudaStreamSynchronize(n2), cudaSuccess);
    APP_CHECK_EQ(cudaFree(q), cudaSuccess);
  };
  auto const green_default = [&](CUcontext ctx, void* p) {
    APP_CHECK_EQ(set_current(ctx), CUDA_SUCCESS);
    use(nullptr, p, MiB, probe.next_generation());  // the green context's default stream
    APP_CHECK_EQ(set_current(primary), CUDA_SUCCESS);
  };
  round([&](void* p) { use(reinterpret_cast<cudaStream_t>(gs), p, MiB, probe.next_generation()); });
  round([&](void* p) { use(reinterpret_cast<cudaStream_t>(blocking), p, MiB, probe.next_generation()); });
  round([&](void* p) { green_default(green_ctx, p); });
  round([&](void* p) {
    CUstream doomed = nullptr;
    APP_CHECK_EQ(green_stream(&doomed, green, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
    use(reinterpret_cast<cudaStream_t>(doomed), p, MiB, probe.next_generation());
    APP_CHECK_EQ(stream_destroy(doomed), CUDA_SUCCESS);  // its work still queued
  });
  round([&](void* p) {
    CUgreenCtx const doomed = make_green();
    green_default(context_of(doomed), p);
    APP_CHECK_EQ(green_destroy(doomed), CUDA_SUCCESS);  // its work still queued
  });
  // Allocations with the green context current are not pooled: CUDA's own.
  APP_CHECK_EQ(set_current(green_ctx), CUDA_SUCCESS);
  void* own = nullptr;
  APP_CHECK_EQ(cudaMalloc(&own, 4 * KiB), cudaSuccess);
  APP_CHECK_EQ(cudaFree(own), cudaSuccess);
  APP_CHECK_EQ(set_current(primary), CUDA_SUCCESS);
  // The reuse first, then a green context made after it.
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, MiB), cudaSuccess);
  use(n1, p, MiB, probe.next_generation());
  ++uses;
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  void* q = nullptr;
  APP_CHECK_EQ(cudaMalloc(&q, MiB), cudaSuccess);
  reused += p == q ? 1 : 0;
  CUgreenCtx const later = make_green();
  CUstream later_stream = nullptr;
  APP_CHECK_EQ(green_stream(&later_stream, later, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
  use(reinterpret_cast<cudaStream_t>(later_stream), q, MiB, probe.next_generation());
  ++uses;
  APP_CHECK_EQ(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(later_stream)), cudaSuccess);
  APP_CHECK_EQ(cudaFree(q), cudaSuccess);
  // Everything run before the probe is read: a use nothing ordered may still be queued.
  for (CUcontext c : {green_ctx, context_of(later), primary}) {
    APP_CHECK_EQ(set_current(c), CUDA_SUCCESS);
    APP_CHECK_EQ(ctx_sync(), CUDA_SUCCESS);
  }
  for (CUstream s : {gs, blocking, later_stream}) APP_CHECK_EQ(stream_destroy(s), CUDA_SUCCESS);
  for (CUgreenCtx g : {green, later}) APP_CHECK_EQ(green_destroy(g), CUDA_SUCCESS);
  for (auto s : {n1, n2}) APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
  printf("REUSED %d USES %d\n", reused, uses);
}

int main(int argc, char** argv) {
  std::string const scenario = argc > 1 ? argv[1] : "";
  APP_CHECK_EQ(cudaFree(nullptr), cudaSuccess);  // the context, as programs make it
  if (scenario == "malloc_any_stream")
    malloc_any_stream();
  else if (scenario == "free_then_reuse")
    free_then_reuse();
  else if (scenario == "cross_family")
    cross_family();
  else if (scenario == "threads")
    threads();
  else if (scenario == "bad_streams")
    bad_streams();
  else if (scenario == "stale_double_free")
    stale_double_free();
  else if (scenario == "green_contexts")
    green_contexts();
  else {
    fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  }
  APP_CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  printf("PROBE violations=%ld ran=%ld\n", probe.violations(), probe.ran());
  return app_finish(scenario.c_str());
}
