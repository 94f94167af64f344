// Test program for many devices and processes: linked against the shared libcudart
// (the simulated one in CI, NVIDIA's on a GPU machine). argv[1] picks the scenario;
// each checks its own results and prints STATS for the gtest driver.
//
//   devices          threads switch devices, allocate on both, free with the other current
//   peer             peer access, peer copies between pooled buffers of two devices
//   stream-device    stream-ordered allocations on another device's stream come from
//                    that device; a free on another device's stream waits for its work
//   limit BYTES      run with GPUMEM_LIMIT=BYTES: the same limit holds on each device
//   percent          (simulated device only) GPUMEM_LIMIT=50% resolves per device
//   ipc              (a pool over cuMemAlloc slabs) a pooled pointer's IPC handle is refused
//   ipc-export       a child process opens the handle and sees the bytes (the default
//                    pool: gpumem's handle; GPUMEM_RESOURCE=cuda: CUDA's)
//   ipc-park         a child holds the import open while the parent frees the block:
//                    the pool does not hand its memory out again until the child closed
//                    it, and then the handle no longer opens
//   ipc-orphan       the importer outlives the exporter: a child exports, frees and exits
//                    while this process holds the import (opened twice: one pointer)
//   fresh-thread     queries, frees and allocations from threads with no context current
//   ipc-leave        the importer exits without closing: the parked block comes back
//   ipc-fork-leave   the same, after the importer forked a child that outlives it
//   ipc-reset        the exporter resets its device while a child holds a parked block
//   ipc-import-reset the importer resets its device: its import ends with the reset
//   ipc-import-reset-created  the same, opened in a context the importer made: it stays
//   rank             one rank of a job: uses device RANK % devices only
//   launcher         a launcher (like torchrun) that touches the driver, starts ranks 0 and 1, waits

#include "app_support.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20U;

int device_count() {
  int n = 0;
  APP_CHECK_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  return n;
}

// A byte pattern that names the buffer it belongs to.
unsigned char pattern_at(unsigned seed, std::size_t i) {
  return static_cast<unsigned char>((seed * 131U + i * 7U) ^ (i >> 8U));
}

void fill(void* p, std::size_t n, unsigned seed) {
  std::vector<unsigned char> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = pattern_at(seed, i);
  APP_CHECK_EQ(cudaMemcpy(p, host.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
}

bool holds(void const* p, std::size_t n, unsigned seed) {
  std::vector<unsigned char> host(n);
  if (cudaMemcpy(host.data(), p, n, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  for (std::size_t i = 0; i < n; ++i) {
    if (host[i] != pattern_at(seed, i)) return false;
  }
  return true;
}

int device_of(void const* p) {
  cudaPointerAttributes a{};
  return cudaPointerGetAttributes(&a, p) == cudaSuccess ? a.device : -1;
}

struct block {
  void* p = nullptr;
  std::size_t bytes = 0;
  int device = -1;
  unsigned seed = 0;
};

// Threads switch devices with cudaSetDevice, allocate on both (sync and stream-
// ordered), then other threads check and free every block with the OTHER device
// current: each pointer must go back to the chain that made it.
void devices() {
  APP_CHECK(device_count() >= 2);
  constexpr int thread_count = 6;
  constexpr int rounds = 120;
  std::vector<std::vector<block>> made(thread_count);
  std::vector<std::thread> pool;
  for (int t = 0; t < thread_count; ++t) {
    pool.emplace_back([t, &made] {
      cudaStream_t streams[2] = {nullptr, nullptr};
      for (int d = 0; d < 2; ++d) {
        APP_CHECK_EQ(cudaSetDevice(d), cudaSuccess);
        APP_CHECK_EQ(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking), cudaSuccess);
      }
      for (int i = 0; i < rounds; ++i) {
        int const d = (t + i) % 2;
        APP_CHECK_EQ(cudaSetDevice(d), cudaSuccess);
        block b;
        b.bytes = (std::size_t{256} << static_cast<unsigned>((t + 3 * i) % 11)) + static_cast<std::size_t>(i);
        b.device = d;
        b.seed = static_cast<unsigned>(t * 1000 + i);
        if (i % 3 == 0) {
          APP_CHECK_EQ(cudaMallocAsync(&b.p, b.bytes, streams[d]), cudaSuccess);
          APP_CHECK_EQ(cudaStreamSynchronize(streams[d]), cudaSuccess);
        } else {
          APP_CHECK_EQ(cudaMalloc(&b.p, b.bytes), cudaSuccess);
        }
        fill(b.p, b.bytes, b.seed);
        made[static_cast<std::size_t>(t)].push_back(b);
      }
      for (int d = 0; d < 2; ++d) {
        APP_CHECK_EQ(cudaSetDevice(d), cudaSuccess);
        APP_CHECK_EQ(cudaStreamDestroy(streams[d]), cudaSuccess);
      }
    });
  }
  for (auto& th : pool) th.join();
  pool.clear();
  auto const mid = app_stats();
  APP_CHECK_EQ(mid.chains, 2);
  APP_CHECK_EQ(mid.live_allocations, thread_count * rounds);
  for (int t = 0; t < thread_count; ++t) {
    pool.emplace_back([t, &made] {
      for (block const& b : made[static_cast<std::size_t>((t + 1) % thread_count)]) {
        APP_CHECK_EQ(cudaSetDevice(1 - b.device), cudaSuccess);
        APP_CHECK_EQ(device_of(b.p), b.device);
        APP_CHECK(holds(b.p, b.bytes, b.seed));  // no other block overlapped it
        APP_CHECK_EQ(cudaFree(b.p), cudaSuccess);
      }
    });
  }
  for (auto& th : pool) th.join();
  auto const st = app_stats();
  APP_CHECK_EQ(st.chain_allocations, thread_count * rounds);
  APP_CHECK_EQ(st.chain_frees, thread_count * rounds);
  APP_CHECK_EQ(st.passthrough_allocations, 0);
  APP_CHECK_EQ(st.double_frees, 0);
  APP_CHECK_EQ(st.live_allocations, 0);
}

// CUDA serves cudaMallocAsync / cuMemAllocAsync from the STREAM's device, whichever
// device is current. And a block freed with cudaFreeAsync on a stream of another
// device may be touched by that stream's work until it runs: the block's own device
// must not hand it out before. The second half queues a peer copy that reads the
// block on device 1's stream (the simulated device runs it only when something
// waits for it), frees the block on that stream, then writes a new owner of the same
// size on device 0 at once: the copy must still read the old bytes.
void stream_device() {
  APP_CHECK(device_count() >= 2);
  constexpr std::size_t n = 8 * MiB;
  cudaStream_t s1 = nullptr;  // device 1, non-blocking
  cudaStream_t b1 = nullptr;  // device 1, blocking
  cudaStream_t s0 = nullptr;  // device 0, non-blocking
  APP_CHECK_EQ(cudaSetDevice(1), cudaSuccess);
  int can = 0;
  APP_CHECK_EQ(cudaDeviceCanAccessPeer(&can, 1, 0), cudaSuccess);
  if (can != 0) {
    cudaError_t const e = cudaDeviceEnablePeerAccess(0, 0);
    APP_CHECK(e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled);
    (void)cudaGetLastError();
  }
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&b1, cudaStreamDefault), cudaSuccess);
  APP_CHECK_EQ(cudaSetDevice(0), cudaSuccess);
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking), cudaSuccess);

  // 1. Allocations on device 1's streams while device 0 is current.
  void* p = nullptr;
  APP_CHECK_EQ(cudaMallocAsync(&p, n, s1), cudaSuccess);
  APP_CHECK_EQ(device_of(p), 1);
  // The driver's spelling, looked up as programs linked to no CUDA library do.
  void* const libcuda = dlopen("libcuda.so.1", RTLD_NOW);
  APP_CHECK(libcuda != nullptr);
  using alloc_async_fn = CUresult (*)(CUdeviceptr*, std::size_t, CUstream);
  using free_async_fn = CUresult (*)(CUdeviceptr, CUstream);
  auto const alloc_async = reinterpret_cast<alloc_async_fn>(dlsym(libcuda, "cuMemAllocAsync"));
  auto const free_async = reinterpret_cast<free_async_fn>(dlsym(libcuda, "cuMemFreeAsync"));
  APP_CHECK(alloc_async != nullptr && free_async != nullptr);
  CUdeviceptr d = 0;
  APP_CHECK_EQ(alloc_async(&d, n, reinterpret_cast<CUstream>(b1)), CUDA_SUCCESS);
  APP_CHECK_EQ(device_of(reinterpret_cast<void*>(d)), 1);
  int current = -1;
  APP_CHECK_EQ(cudaGetDevice(&current), cudaSuccess);
  APP_CHECK_EQ(current, 0);  // the shim left the caller's device current
  APP_CHECK_EQ(cudaFreeAsync(p, s1), cudaSuccess);
  APP_CHECK_EQ(free_async(d, reinterpret_cast<CUstream>(b1)), CUDA_SUCCESS);
  APP_CHECK_EQ(cudaStreamSynchronize(s1), cudaSuccess);
  APP_CHECK_EQ(cudaStreamSynchronize(b1), cudaSuccess);

  // 2. Device 0's blocks freed on device 1's streams while a copy there still reads them.
  void* dst = nullptr;
  APP_CHECK_EQ(cudaSetDevice(1), cudaSuccess);
  APP_CHECK_EQ(cudaMalloc(&dst, n), cudaSuccess);
  int reused = 0;
  for (int round = 0; round < 8; ++round) {
    bool const async_block = round % 2 == 1;  // cudaMallocAsync's memory, or cudaMalloc's
    cudaStream_t const on = round % 4 < 2 ? s1 : b1;
    unsigned const seed = 100U + static_cast<unsigned>(round);
    APP_CHECK_EQ(cudaSetDevice(0), cudaSuccess);
    void* a = nullptr;
    if (async_block) {
      APP_CHECK_EQ(cudaMallocAsync(&a, n, s0), cudaSuccess);
      APP_CHECK_EQ(cudaStreamSynchronize(s0), cudaSuccess);
    } else {
      APP_CHECK_EQ(cudaMalloc(&a, n), cudaSuccess);
    }
    APP_CHECK_EQ(device_of(a), 0);
    fill(a, n, seed);
    APP_CHECK_EQ(cudaSetDevice(1), cudaSuccess);
    APP_CHECK_EQ(cudaMemcpyPeerAsync(dst, 1, a, 0, n, on), cudaSuccess);
    APP_CHECK_EQ(cudaFreeAsync(a, on), cudaSuccess);
    APP_CHECK_EQ(cudaSetDevice(0), cudaSuccess);
    void* next = nullptr;  // a new owner of the same size, written at once
    APP_CHECK_EQ(cudaMalloc(&next, n), cudaSuccess);
    if (next == a) ++reused;
    fill(next, n, seed + 50U);
    APP_CHECK_EQ(cudaStreamSynchronize(on), cudaSuccess);
    APP_CHECK(holds(dst, n, seed));  // the copy read the bytes it was queued after
    APP_CHECK_EQ(cudaFree(next), cudaSuccess);
  }
  printf("STREAM-DEVICE reused=%d\n", reused);
  APP_CHECK_EQ(cudaSetDevice(1), cudaSuccess);
  APP_CHECK_EQ(cudaFree(dst), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(s1), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(b1), cudaSuccess);
  APP_CHECK_EQ(cudaSetDevice(0), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(s0), cudaSuccess);
  auto const st = app_stats();
  APP_CHECK_EQ(st.passthrough_allocations, 0);
  APP_CHECK_EQ(st.live_allocations, 0);
}

// Peer access and peer copies between pooled buffers that do not start their slab.
void peer() {
  APP_CHECK(device_count() >= 2);
  constexpr std::size_t n = 3 * MiB + 512;
  void* warm[2] = {nullptr, nullptr};
  void* buf[2] = {nullptr, nullptr};
  void* async_buf[2] = {nullptr, nullptr};
  cudaStream_t s[2] = {nullptr, nullptr};
  for (int d = 0; d < 2; ++d) {
    APP_CHECK_EQ(cudaSetDevice(d), cudaSuccess);
    int can = 0;
    APP_CHECK_EQ(cudaDeviceCanAccessPeer(&can, d, 1 - d), cudaSuccess);
    printf("PEER %d->%d can_access=%d\n", d, 1 - d, can);
    if (can != 0) {
      cudaError_t const e = cudaDeviceEnablePeerAccess(1 - d, 0);
      APP_CHECK(e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled);
      (void)cudaGetLastError();
    }
    APP_CHECK_EQ(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking), cudaSuccess);
    APP_CHECK_EQ(cudaMalloc(&warm[d], 4096), cudaSuccess);  // the buffers below sit inside the slab
    APP_CHECK_EQ(cudaMalloc(&buf[d], n), cudaSuccess);
    APP_CHECK_EQ(cudaMallocAsync(&async_buf[d], n, s[d]), cudaSuccess);
    APP_CHECK_EQ(cudaStreamSynchronize(s[d]), cudaSuccess);
    APP_CHECK_EQ(device_of(buf[d]), d);
    APP_CHECK_EQ(device_of(async_buf[d]), d);
  }
  fill(buf[0], n, 11);
  fill(buf[1], n, 22);
  // Device 0's stream copies 0 -> 1's stream-ordered buffer; device 1's copies back.
  APP_CHECK_EQ(cudaSetDevice(0), cudaSuccess);
  APP_CHECK_EQ(cudaMemcpyPeerAsync(async_buf[1], 1, buf[0], 0, n, s[0]), cudaSuccess);
  APP_CHECK_EQ(cudaSetDevice(1), cudaSuccess);
  APP_CHECK_EQ(cudaMemcpyPeerAsync(async_buf[0], 0, buf[1], 1, n, s[1]), cudaSuccess);
  APP_CHECK_EQ(cudaStreamSynchronize(s[0]), cudaSuccess);
  APP_CHECK_EQ(cudaStreamSynchronize(s[1]), cudaSuccess);
  APP_CHECK(holds(async_buf[1], n, 11));
  APP_CHECK(holds(async_buf[0], n, 22));
  // Synchronous peer copy, and a unified-addressing copy across devices.
  APP_CHECK_EQ(cudaMemcpyPeer(buf[1], 1, async_buf[1], 1, n), cudaSuccess);  // same device through the peer API
  APP_CHECK_EQ(cudaMemcpyPeer(buf[0], 0, buf[1], 1, n / 2), cudaSuccess);
  APP_CHECK_EQ(cudaMemcpy(static_cast<char*>(buf[0]) + n / 2, static_cast<char*>(async_buf[1]) + n / 2, n - n / 2,
                          cudaMemcpyDefault),
               cudaSuccess);
  APP_CHECK(holds(buf[0], n, 11));
  APP_CHECK(holds(buf[1], n, 11));
  // Everything freed with the other device current; stream-ordered ones on the other's stream.
  for (int d = 0; d < 2; ++d) {
    APP_CHECK_EQ(cudaSetDevice(1 - d), cudaSuccess);
    APP_CHECK_EQ(cudaFree(warm[d]), cudaSuccess);
    APP_CHECK_EQ(cudaFree(buf[d]), cudaSuccess);
    APP_CHECK_EQ(cudaFreeAsync(async_buf[d], s[1 - d]), cudaSuccess);
  }
  for (int d = 0; d < 2; ++d) {
    APP_CHECK_EQ(cudaSetDevice(d), cudaSuccess);
    APP_CHECK_EQ(cudaStreamSynchronize(s[d]), cudaSuccess);
    APP_CHECK_EQ(cudaStreamDestroy(s[d]), cudaSuccess);
  }
  auto const st = app_stats();
  APP_CHECK_EQ(st.chains, 2);
  APP_CHECK_EQ(st.chain_allocations, 6);
  APP_CHECK_EQ(st.chain_frees, 6);
  APP_CHECK_EQ(st.passthrough_allocations, 0);
  APP_CHECK_EQ(st.live_allocations, 0);
}

std::size_t free_on(int device, std::size_t* total = nullptr) {
  std::size_t f = 0;
  std::size_t t = 0;
  APP_CHECK_EQ(cudaSetDevice(device), cudaSuccess);
  APP_CHECK_EQ(cudaMemGetInfo(&f, &t), cudaSuccess);
  if (total != nullptr) *total = t;
  return f;
}

// One process, two devices, the same limit on each (GPUMEM_LIMIT): cudaMemGetInfo
// reports each device's own limit and use, and device 1 still has its whole limit
// when device 0 has run into its own.
void limit(std::size_t cap) {
  APP_CHECK(device_count() >= 2);
  APP_CHECK(cap >= 8 * MiB);
  // Before any allocation: frameworks size themselves from this first answer.
  for (int d = 0; d < 2; ++d) {
    std::size_t total = 0;
    std::size_t const f = free_on(d, &total);
    APP_CHECK_EQ(total, cap);
    APP_CHECK_EQ(f, cap);
  }
  void* first[2] = {nullptr, nullptr};
  for (int d = 0; d < 2; ++d) {
    APP_CHECK_EQ(cudaSetDevice(d), cudaSuccess);
    APP_CHECK_EQ(cudaMalloc(&first[d], MiB), cudaSuccess);
    std::size_t total = 0;
    std::size_t const f = free_on(d, &total);
    printf("MEMINFO device=%d free=%zu total=%zu\n", d, f, total);
    APP_CHECK_EQ(total, cap);
    APP_CHECK_EQ(f, cap - MiB);
  }
  std::size_t const half = cap / 2;
  void* big0 = nullptr;
  APP_CHECK_EQ(cudaSetDevice(0), cudaSuccess);
  APP_CHECK_EQ(cudaMalloc(&big0, half), cudaSuccess);
  APP_CHECK_EQ(free_on(0), cap - MiB - half);
  APP_CHECK_EQ(free_on(1), cap - MiB);  // device 1 unaffected
  // Past device 0's limit: refused there, as CUDA refuses when a device is full.
  APP_CHECK_EQ(cudaSetDevice(0), cudaSuccess);
  void* over = nullptr;
  APP_CHECK_EQ(cudaMalloc(&over, cap - half), cudaErrorMemoryAllocation);
  APP_CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  // The same request fits on device 1, whose limit is its own; one more does not.
  void* big1 = nullptr;
  APP_CHECK_EQ(cudaSetDevice(1), cudaSuccess);
  APP_CHECK_EQ(cudaMalloc(&big1, cap - 2 * MiB), cudaSuccess);
  APP_CHECK_EQ(free_on(1), MiB);
  APP_CHECK_EQ(cudaMalloc(&over, 2 * MiB), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  // Freed with the other device current: each device's free memory comes back.
  APP_CHECK_EQ(cudaSetDevice(1), cudaSuccess);
  APP_CHECK_EQ(cudaFree(big0), cudaSuccess);
  APP_CHECK_EQ(cudaFree(first[0]), cudaSuccess);
  APP_CHECK_EQ(cudaSetDevice(0), cudaSuccess);
  APP_CHECK_EQ(cudaFree(big1), cudaSuccess);
  APP_CHECK_EQ(cudaFree(first[1]), cudaSuccess);
  APP_CHECK_EQ(free_on(0), cap);
  APP_CHECK_EQ(free_on(1), cap);
  auto const st = app_stats();
  APP_CHECK_EQ(st.chains, 2);
  APP_CHECK_EQ(st.failed_allocations, 2);
  APP_CHECK_EQ(st.live_allocations, 0);
}

// A percentage limit resolves against each device's own memory (simulated device:
// device 1 is made half the size of device 0 before anything runs).
void percent() {
  using resize_fn = void (*)(int, std::size_t);
  APP_CHECK_EQ(cudaFree(nullptr), cudaSuccess);  // loads the driver: the sim's control API is found there
  auto const resize = reinterpret_cast<resize_fn>(app_sim_symbol("gpumemsim_set_device_memory"));
  if (resize == nullptr) {
    printf("SKIP percent: needs the simulated device\n");
    return;
  }
  resize(0, 512 * MiB);
  resize(1, 256 * MiB);
  std::size_t const expected[2] = {256 * MiB, 128 * MiB};  // GPUMEM_LIMIT=50%
  void* p[2] = {nullptr, nullptr};
  for (int d = 0; d < 2; ++d) {
    APP_CHECK_EQ(cudaSetDevice(d), cudaSuccess);
    APP_CHECK_EQ(cudaMalloc(&p[d], MiB), cudaSuccess);
    std::size_t total = 0;
    std::size_t const f = free_on(d, &total);
    printf("MEMINFO device=%d free=%zu total=%zu\n", d, f, total);
    APP_CHECK_EQ(total, expected[d]);
    void* over = nullptr;
    APP_CHECK_EQ(cudaMalloc(&over, expected[d]), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
  }
  for (int d = 0; d < 2; ++d) APP_CHECK_EQ(cudaFree(p[d]), cudaSuccess);
}

std::string hex(void const* data, std::size_t n) {
  static char const digits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    auto const b = static_cast<unsigned char const*>(data)[i];
    out += digits[b >> 4U];
    out += digits[b & 15U];
  }
  return out;
}

bool unhex(std::string const& text, void* data, std::size_t n) {
  if (text.size() != 2 * n) return false;
  for (std::size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    if (std::sscanf(text.c_str() + 2 * i, "%2x", &v) != 1) return false;
    static_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(v);
  }
  return true;
}

// A pool over cuMemAlloc slabs (GPUMEM_RESOURCE=cuda-pool): the handle of a pooled
// block would open the whole slab in the other process, so it is refused, with the
// fix in the message.
void ipc() {
  void* warm = nullptr;
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&warm, 4096), cudaSuccess);
  APP_CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  cudaIpcMemHandle_t h{};
  APP_CHECK_EQ(cudaIpcGetMemHandle(&h, p), cudaErrorNotSupported);
  APP_CHECK_EQ(cudaGetLastError(), cudaSuccess);  // refused before the runtime: no last error
  APP_CHECK_EQ(app_stats().ipc_refused, 1);
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  APP_CHECK_EQ(cudaFree(warm), cudaSuccess);
}

// Spans two 2 MiB pages and part of a third.
constexpr std::size_t ipc_bytes = 4 * MiB + 64 * 1024;

pid_t spawn_self(std::vector<std::string> args) {
  std::vector<char*> argv;
  static char self[] = "/proc/self/exe";
  argv.push_back(self);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  APP_CHECK_EQ(posix_spawn(&pid, self, nullptr, nullptr, argv.data(), environ), 0);
  return pid;
}

bool exited_cleanly(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A child process (also under the shim) opens exactly this allocation: with the
// default pool through gpumem's handle, with GPUMEM_RESOURCE=cuda through CUDA's.
void ipc_export() {
  void* warm = nullptr;
  void* p = nullptr;
  constexpr std::size_t n = ipc_bytes;
  APP_CHECK_EQ(cudaMalloc(&warm, 4096), cudaSuccess);
  APP_CHECK_EQ(cudaMalloc(&p, n), cudaSuccess);
  fill(p, n, 77);
  cudaIpcMemHandle_t h{};
  auto const syncs = app_stats().device_syncs;
  // From a thread that never called CUDA (no context current), as a multiprocessing
  // queue's feeder thread pickles a PyTorch tensor.
  std::thread{[&] { APP_CHECK_EQ(cudaIpcGetMemHandle(&h, p), cudaSuccess); }}.join();
  // Asked again (PyTorch asks at every send): the same handle, without another wait
  // for the device (the first export waited for work on the block's earlier owners).
  cudaIpcMemHandle_t again{};
  APP_CHECK_EQ(cudaIpcGetMemHandle(&again, p), cudaSuccess);
  APP_CHECK(std::memcmp(&h, &again, sizeof h) == 0);
  if (std::memcmp(&h, "gpumemI1", 8) == 0) APP_CHECK_EQ(app_stats().device_syncs, syncs + 1);  // gpumem's handle
  APP_CHECK(exited_cleanly(spawn_self({"ipc-open", hex(&h, sizeof h)})));
  APP_CHECK(holds(p, n, 78));  // the child wrote its reply into the same memory
  APP_CHECK_EQ(app_stats().ipc_refused, 0);
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  APP_CHECK_EQ(cudaFree(warm), cudaSuccess);
}

void ipc_open(std::string const& handle_hex) {
  cudaIpcMemHandle_t h{};
  APP_CHECK(unhex(handle_hex, &h, sizeof h));
  void* p = nullptr;
  APP_CHECK_EQ(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  constexpr std::size_t n = ipc_bytes;
  if (p != nullptr) {
    APP_CHECK(holds(p, n, 77));
    fill(p, n, 78);
    APP_CHECK_EQ(cudaIpcCloseMemHandle(p), cudaSuccess);
  }
}

// A child running `scenario` on handle `h` (argv: scenario, handle, then the fds of
// its two pipe ends): `from` reads its signals, `go` lets it go on.
struct holder {
  pid_t pid = 0;
  int from = -1;
  int go = -1;
  bool opened = false;  ///< it signalled once: the allocation is open there
};

holder start_holder(std::string const& scenario, cudaIpcMemHandle_t const& h, std::vector<std::string> extra = {}) {
  int from[2];
  int go[2];
  APP_CHECK_EQ(pipe(from), 0);
  APP_CHECK_EQ(pipe(go), 0);
  // Ours stay ours: a later child holding them would keep a pipe from ending.
  APP_CHECK_EQ(fcntl(from[0], F_SETFD, FD_CLOEXEC), 0);
  APP_CHECK_EQ(fcntl(go[1], F_SETFD, FD_CLOEXEC), 0);
  std::vector<std::string> args = {scenario, hex(&h, sizeof h), std::to_string(from[1]), std::to_string(go[0])};
  args.insert(args.end(), extra.begin(), extra.end());
  holder c;
  c.pid = spawn_self(args);
  close(from[1]);  // the child's ends: a child that fails ends the pipe
  close(go[0]);
  c.from = from[0];
  c.go = go[1];
  char byte = 0;
  c.opened = read(c.from, &byte, 1) == 1;
  APP_CHECK(c.opened);
  if (!c.opened) APP_CHECK(!exited_cleanly(c.pid));
  return c;
}

bool finish_holder(holder const& c) {
  bool const ok = write(c.go, "g", 1) == 1 && exited_cleanly(c.pid);
  close(c.from);
  close(c.go);
  return ok;
}

// The server thread sees an import end asynchronously: waits (at most 5 s) for the
// parked bytes to become `want`.
bool parked_becomes(unsigned long long want) {
  for (int i = 0; i < 500 && app_stats().ipc_parked_bytes != want; ++i) usleep(10000);
  return app_stats().ipc_parked_bytes == want;
}

// A block of ipc_bytes filled with 77 and its handle.
void* exported_block(cudaIpcMemHandle_t& h) {
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, ipc_bytes), cudaSuccess);
  fill(p, ipc_bytes, 77);
  APP_CHECK_EQ(cudaIpcGetMemHandle(&h, p), cudaSuccess);
  return p;
}

void ipc_park() {
  void* warm = nullptr;
  constexpr std::size_t n = ipc_bytes;
  APP_CHECK_EQ(cudaMalloc(&warm, 4096), cudaSuccess);
  cudaIpcMemHandle_t h{};
  void* const p = exported_block(h);
  holder const child = start_holder("ipc-hold", h);  // it opens the handle and writes 78
  if (!child.opened) return;
  APP_CHECK(holds(p, n, 78));
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);              // while the child still has it open
  APP_CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);  // nothing left to wait for: reusable, if given back
  void* q = nullptr;
  APP_CHECK_EQ(cudaMalloc(&q, n), cudaSuccess);
  printf("IPC parked_reused=%d\n", q == p ? 1 : 0);
  fill(q, n, 99);                   // must not land in the child's memory
  APP_CHECK(finish_holder(child));  // it still reads 78, and closes
  // Closed: the pool has the block back, and the handle no longer opens.
  APP_CHECK(exited_cleanly(spawn_self({"ipc-stale", hex(&h, sizeof h)})));
  APP_CHECK_EQ(cudaFree(q), cudaSuccess);
  APP_CHECK_EQ(cudaFree(warm), cudaSuccess);
}

// The importer exits without closing: its end of the connection closes with it,
// and the parked block goes back to the pool.
// With `forked`, the importer first forks a child that outlives it: that child's
// copy of the connection must not keep the import open.
void ipc_leave(bool forked) {
  void* warm = nullptr;
  constexpr std::size_t n = ipc_bytes;
  APP_CHECK_EQ(cudaMalloc(&warm, 4096), cudaSuccess);
  cudaIpcMemHandle_t h{};
  void* const p = exported_block(h);
  holder const child = start_holder("ipc-hold", h, {forked ? "fork-leave" : "leave"});
  if (!child.opened) return;
  APP_CHECK(holds(p, n, 78));
  APP_CHECK_EQ(app_stats().ipc_parked_bytes, 0);
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  APP_CHECK_EQ(app_stats().ipc_parked_bytes, n);
  if (forked) {
    APP_CHECK_EQ(write(child.go, "g", 1), 1);
    APP_CHECK(exited_cleanly(child.pid));  // its forked child still runs, reading `go`
    APP_CHECK(parked_becomes(0));
    close(child.go);  // which ends the forked child
    close(child.from);
  } else {
    APP_CHECK(finish_holder(child));
    APP_CHECK(parked_becomes(0));
  }
  APP_CHECK(exited_cleanly(spawn_self({"ipc-stale", hex(&h, sizeof h)})));
  APP_CHECK_EQ(cudaFree(warm), cudaSuccess);
}

// The exporter resets its device while a child holds a block it freed (parked):
// the reset drops the device's export records (the parked block is not given back
// to the retired chain, and its handle no longer opens), and the child's later
// close finds nothing to give back. A new block of the same size (maybe at the same
// address) is exported, imported and parked on its own.
void ipc_reset() {
  constexpr std::size_t n = ipc_bytes;
  cudaIpcMemHandle_t h{};
  void* const p = exported_block(h);
  holder const first = start_holder("ipc-hold", h);
  if (!first.opened) return;
  APP_CHECK(holds(p, n, 78));
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  APP_CHECK_EQ(app_stats().ipc_parked_bytes, n);
  APP_CHECK_EQ(cudaDeviceReset(), cudaSuccess);
  APP_CHECK_EQ(app_stats().ipc_parked_bytes, 0);
  void* q = nullptr;
  APP_CHECK_EQ(cudaMalloc(&q, n), cudaSuccess);
  printf("IPC reset_reused=%d\n", q == p ? 1 : 0);
  fill(q, n, 77);
  APP_CHECK(holds(q, n, 77));
  cudaIpcMemHandle_t h2{};
  APP_CHECK_EQ(cudaIpcGetMemHandle(&h2, q), cudaSuccess);
  holder const second = start_holder("ipc-hold", h2);
  if (!second.opened) return;
  APP_CHECK(finish_holder(first));  // it still reads 78 through its mapping, and closes
  // Answered after the server saw the first import end: the old handle is dead.
  APP_CHECK(exited_cleanly(spawn_self({"ipc-stale", hex(&h, sizeof h)})));
  APP_CHECK_EQ(cudaFree(q), cudaSuccess);
  APP_CHECK_EQ(app_stats().ipc_parked_bytes, n);  // the second child has it open still
  APP_CHECK(finish_holder(second));
  APP_CHECK(parked_becomes(0));
  APP_CHECK(exited_cleanly(spawn_self({"ipc-stale", hex(&h2, sizeof h2)})));
}

// The importer (a child) resets its device while it holds the import: the reset
// ends it (the exporter gives the parked block back while the child still runs),
// and the child's close afterwards is CUDA's error. With `created`, the child opened
// it in a context it made (cuCtxCreate), which the reset of the primary context
// leaves alone: the import stays open until the child closes it.
void ipc_import_reset(bool created) {
  constexpr std::size_t n = ipc_bytes;
  cudaIpcMemHandle_t h{};
  void* const p = exported_block(h);
  holder const child = start_holder("ipc-reset-hold", h, {created ? "created" : "primary"});
  if (!child.opened) return;
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  APP_CHECK_EQ(app_stats().ipc_parked_bytes, n);
  APP_CHECK_EQ(write(child.go, "g", 1), 1);
  char byte = 0;
  APP_CHECK_EQ(read(child.from, &byte, 1), 1);  // it reset its device, and has not closed
  if (created) {
    usleep(200000);  // an import ended by the reset would have been seen by now
    APP_CHECK_EQ(app_stats().ipc_parked_bytes, n);
  } else {
    APP_CHECK(parked_becomes(0));
  }
  APP_CHECK(finish_holder(child));  // its close now fails (created: succeeds)
  APP_CHECK(parked_becomes(0));
  APP_CHECK(exited_cleanly(spawn_self({"ipc-stale", hex(&h, sizeof h)})));
}

void ipc_reset_hold(std::string const& handle_hex, int to_parent, int go, bool created) {
  cudaIpcMemHandle_t h{};
  APP_CHECK(unhex(handle_hex, &h, sizeof h));
  void* p = nullptr;
  constexpr std::size_t n = ipc_bytes;
  CUcontext ctx = nullptr;
  if (created) {
    APP_CHECK_EQ(cudaFree(nullptr), cudaSuccess);  // the primary context, current
    using create_fn = CUresult (*)(CUcontext*, void*, unsigned, CUdevice);
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    auto const create = lib != nullptr ? reinterpret_cast<create_fn>(dlsym(lib, "cuCtxCreate_v4")) : nullptr;
    APP_CHECK(create != nullptr && create(&ctx, nullptr, 0, 0) == CUDA_SUCCESS);  // pushed: current now
  }
  APP_CHECK_EQ(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  if (p == nullptr) return;
  APP_CHECK(holds(p, n, 77));
  APP_CHECK_EQ(write(to_parent, "o", 1), 1);
  char byte = 0;
  APP_CHECK_EQ(read(go, &byte, 1), 1);
  APP_CHECK_EQ(cudaDeviceReset(), cudaSuccess);
  APP_CHECK_EQ(write(to_parent, "r", 1), 1);
  APP_CHECK_EQ(read(go, &byte, 1), 1);
  if (created) {  // the created context's import is still open
    APP_CHECK(holds(p, n, 77));
    APP_CHECK_EQ(cudaIpcCloseMemHandle(p), cudaSuccess);
    return;
  }
  cudaPointerAttributes a{};
  APP_CHECK(cudaPointerGetAttributes(&a, p) != cudaSuccess || a.type != cudaMemoryTypeDevice);  // unmapped
  (void)cudaGetLastError();
  long const unmaps = app_sim_calls("cuMemUnmap");
  long const address_frees = app_sim_calls("cuMemAddressFree");
  APP_CHECK(cudaIpcCloseMemHandle(p) != cudaSuccess);  // no longer open: CUDA's error
  (void)cudaGetLastError();
  APP_CHECK_EQ(app_sim_calls("cuMemUnmap"), unmaps);  // and nothing done to the range
  APP_CHECK_EQ(app_sim_calls("cuMemAddressFree"), address_frees);
}

// How ipc_hold ends: closing the import, exiting without closing, or exiting
// without closing after forking a child that lives on (until `go` ends).
enum class hold_end { close, leave, fork_leave };

void ipc_hold(std::string const& handle_hex, int opened, int go, hold_end end = hold_end::close) {
  cudaIpcMemHandle_t h{};
  APP_CHECK(unhex(handle_hex, &h, sizeof h));
  void* p = nullptr;
  constexpr std::size_t n = ipc_bytes;
  APP_CHECK_EQ(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  if (p == nullptr) return;
  APP_CHECK(holds(p, n, 77));
  fill(p, n, 78);
  APP_CHECK_EQ(write(opened, "o", 1), 1);
  char byte = 0;
  APP_CHECK_EQ(read(go, &byte, 1), 1);  // the parent freed it and allocated again
  APP_CHECK(holds(p, n, 78));
  if (end == hold_end::close) APP_CHECK_EQ(cudaIpcCloseMemHandle(p), cudaSuccess);
  if (end == hold_end::fork_leave && fork() == 0) {  // a worker, as a DataLoader forks
    while (read(go, &byte, 1) > 0) {}
    _exit(0);
  }
}

void ipc_orphan() {
  int handle_pipe[2];
  int go[2];
  APP_CHECK_EQ(pipe(handle_pipe), 0);
  APP_CHECK_EQ(pipe(go), 0);
  pid_t const child = spawn_self({"ipc-give", std::to_string(handle_pipe[1]), std::to_string(go[0])});
  close(handle_pipe[1]);
  close(go[0]);
  std::string text(2 * sizeof(cudaIpcMemHandle_t), '\0');
  bool const got = read(handle_pipe[0], text.data(), text.size()) == static_cast<ssize_t>(text.size());
  APP_CHECK(got);
  cudaIpcMemHandle_t h{};
  if (!got || !unhex(text, &h, sizeof h)) {
    APP_CHECK(!exited_cleanly(child));
    return;
  }
  constexpr std::size_t n = ipc_bytes;
  void* p = nullptr;
  void* again = nullptr;
  APP_CHECK_EQ(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  APP_CHECK_EQ(cudaIpcOpenMemHandle(&again, h, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  APP_CHECK(again == p);  // one mapping, counted
  APP_CHECK(holds(p, n, 55));
  APP_CHECK_EQ(write(go[1], "g", 1), 1);
  APP_CHECK(exited_cleanly(child));  // it freed the block and exited
  APP_CHECK(holds(p, n, 55));        // the mapping holds the pages still
  fill(p, n, 56);
  APP_CHECK(holds(p, n, 56));
  APP_CHECK_EQ(cudaIpcCloseMemHandle(p), cudaSuccess);
  APP_CHECK_EQ(app_stats().device_syncs, 0);
  APP_CHECK_EQ(cudaIpcCloseMemHandle(again), cudaSuccess);
  // The last close waited for the work queued on the mapping before unmapping it.
  APP_CHECK_EQ(app_stats().device_syncs, 1);
  APP_CHECK(cudaIpcCloseMemHandle(p) != cudaSuccess);  // no longer open: CUDA's error
  (void)cudaGetLastError();
}

void ipc_give(int handle_fd, int go) {
  constexpr std::size_t n = ipc_bytes;
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, n), cudaSuccess);
  fill(p, n, 55);
  cudaIpcMemHandle_t h{};
  APP_CHECK_EQ(cudaIpcGetMemHandle(&h, p), cudaSuccess);
  std::string const text = hex(&h, sizeof h);
  APP_CHECK_EQ(write(handle_fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  char byte = 0;
  APP_CHECK_EQ(read(go, &byte, 1), 1);
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);  // parked: the other process has it open
}

void ipc_stale(std::string const& handle_hex) {
  cudaIpcMemHandle_t h{};
  APP_CHECK(unhex(handle_hex, &h, sizeof h));
  void* p = nullptr;
  APP_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess);
  (void)cudaGetLastError();
}

// Calls from a thread that never used CUDA (no context current until the runtime
// makes one): what a multiprocessing feeder thread or a framework's worker thread
// does. Each is answered as without gpumem, and pooled memory stays the pool's.
void fresh_thread() {
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  auto const before = app_stats();
  std::thread{[&] {
    cudaPointerAttributes a{};
    APP_CHECK_EQ(cudaPointerGetAttributes(&a, p), cudaSuccess);
    APP_CHECK_EQ(a.type, cudaMemoryTypeDevice);
    std::size_t free_bytes = 0;
    std::size_t total = 0;
    APP_CHECK_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
    APP_CHECK(free_bytes > 0 && total >= free_bytes);
    APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  }}.join();
  std::thread{[&] {
    void* q = nullptr;
    APP_CHECK_EQ(cudaMalloc(&q, 1 << 20), cudaSuccess);
    fill(q, 1 << 20, 5);
    APP_CHECK(holds(q, 1 << 20, 5));
    APP_CHECK_EQ(cudaFree(q), cudaSuccess);
  }}.join();
  auto const after = app_stats();
  APP_CHECK_EQ(after.chain_frees - before.chain_frees, 2);
  APP_CHECK_EQ(after.chain_allocations - before.chain_allocations, 1);
  APP_CHECK_EQ(after.passthrough_allocations, before.passthrough_allocations);
  APP_CHECK_EQ(after.double_frees, 0);
}

// One rank of a multi-process job: its device only. The rank comes from the
// launcher's variable, looked up in the order gpumem's %r template uses.
void rank() {
  char const* r = nullptr;
  for (char const* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK"}) {
    if (char const* x = std::getenv(v); r == nullptr && x != nullptr && *x != '\0') r = x;
  }
  APP_CHECK(r != nullptr);
  int const n = device_count();
  if (n < 1) return;
  int const d = (r != nullptr ? std::atoi(r) : 0) % n;
  APP_CHECK_EQ(cudaSetDevice(d), cudaSuccess);
  std::vector<void*> ps(12);
  for (std::size_t i = 0; i < ps.size(); ++i) {
    APP_CHECK_EQ(cudaMalloc(&ps[i], (i + 1) * 4096), cudaSuccess);
    APP_CHECK_EQ(device_of(ps[i]), d);
  }
  for (void* p : ps) APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  printf("RANK %s device=%d\n", r != nullptr ? r : "?", d);
}

// A launcher like torchrun or mpirun under gpumem-run: it loads CUDA and asks for
// the device count (no allocation), then starts two ranks of this program (they
// inherit the shim through the environment) and waits for them.
void launcher() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  APP_CHECK(lib != nullptr);
  using init_fn = CUresult (*)(unsigned);
  using count_fn = CUresult (*)(int*);
  int n = 0;
  if (lib != nullptr) {
    APP_CHECK_EQ(reinterpret_cast<init_fn>(dlsym(lib, "cuInit"))(0), CUDA_SUCCESS);
    APP_CHECK_EQ(reinterpret_cast<count_fn>(dlsym(lib, "cuDeviceGetCount"))(&n), CUDA_SUCCESS);
  }
  APP_CHECK(n >= 2);
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "RANK=", 5) != 0) env.emplace_back(*e);
    }
    env.push_back("RANK=" + std::to_string(r));
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    char const* self = "/proc/self/exe";
    std::vector<char*> argv = {const_cast<char*>(self), const_cast<char*>("rank"), nullptr};
    pid_t pid = 0;
    APP_CHECK_EQ(posix_spawn(&pid, self, nullptr, nullptr, argv.data(), envp.data()), 0);
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    APP_CHECK_EQ(waitpid(pid, &status, 0), pid);
    APP_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string const scenario = argc > 1 ? argv[1] : "devices";
  if (scenario == "devices")
    devices();
  else if (scenario == "peer")
    peer();
  else if (scenario == "stream-device")
    stream_device();
  else if (scenario == "limit" && argc > 2)
    limit(std::strtoull(argv[2], nullptr, 10));
  else if (scenario == "percent")
    percent();
  else if (scenario == "ipc")
    ipc();
  else if (scenario == "ipc-export")
    ipc_export();
  else if (scenario == "ipc-open" && argc > 2)
    ipc_open(argv[2]);
  else if (scenario == "ipc-park")
    ipc_park();
  else if (scenario == "ipc-hold" && argc > 4)
    ipc_hold(argv[2], std::atoi(argv[3]), std::atoi(argv[4]),
             argc <= 5                                 ? hold_end::close
             : std::strcmp(argv[5], "leave") == 0      ? hold_end::leave
             : std::strcmp(argv[5], "fork-leave") == 0 ? hold_end::fork_leave
                                                       : hold_end::close);
  else if (scenario == "fresh-thread")
    fresh_thread();
  else if (scenario == "ipc-leave")
    ipc_leave(false);
  else if (scenario == "ipc-fork-leave")
    ipc_leave(true);
  else if (scenario == "ipc-reset")
    ipc_reset();
  else if (scenario == "ipc-import-reset")
    ipc_import_reset(false);
  else if (scenario == "ipc-import-reset-created")
    ipc_import_reset(true);
  else if (scenario == "ipc-reset-hold" && argc > 5)
    ipc_reset_hold(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::string{argv[5]} == "created");
  else if (scenario == "ipc-stale" && argc > 2)
    ipc_stale(argv[2]);
  else if (scenario == "ipc-orphan")
    ipc_orphan();
  else if (scenario == "ipc-give" && argc > 3)
    ipc_give(std::atoi(argv[2]), std::atoi(argv[3]));
  else if (scenario == "rank")
    rank();
  else if (scenario == "launcher")
    launcher();
  else {
    fprintf(stderr,
            "usage: %s devices|peer|stream-device|limit "
            "BYTES|percent|ipc|ipc-export|ipc-park|ipc-orphan|ipc-leave|ipc-fork-leave|fresh-thread|"
            "ipc-reset|ipc-import-reset|ipc-import-reset-created|rank|launcher\n",
            argv[0]);
    return 2;
  }
  return app_finish(scenario.c_str());
}
