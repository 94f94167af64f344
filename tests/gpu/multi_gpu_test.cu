// Two or more GPUs under gpumem, with the STATIC CUDA runtime (nvcc's default: every
// allocation reaches the shim through cuGetProcAddress). Kernels write and check a
// distinct pattern in every buffer. One scenario per run; prints one line
// "PASS <scenario>" or "FAIL <scenario>: <why>" and exits 0 only on PASS.
//
//   multi_gpu_test threads       threads switch devices with cudaSetDevice, allocate on
//                                both (cudaMalloc, cudaMallocAsync); other threads check
//                                every buffer by kernel and free it with the other device current
//   multi_gpu_test peer          peer access; cudaMemcpyPeerAsync between pooled buffers of
//                                two devices; a kernel on each device reads (and writes) the
//                                other's pooled buffer
//   multi_gpu_test meminfo       default pool: cudaMemGetInfo on each device follows that
//                                device's pool (memory the pool caches counts as free)
//   multi_gpu_test limit BYTES   under GPUMEM_LIMIT=BYTES: cudaMemGetInfo shows the limit on
//                                each device; each device fills up to its own limit and no further
//   multi_gpu_test foreign-stream  stream-ordered calls on another device's stream: an
//                                allocation on device 1's stream (device 0 current) comes
//                                from device 1; a block freed on a stream whose kernel still
//                                writes it (late) is handed to a new owner only after that
//                                kernel, for a block of device 1 freed there with device 0
//                                current, and for a block of device 0 freed on device 1's stream
//
// Build: nvcc -O2 -arch=sm_90 -o multi_gpu_test tests/gpu/multi_gpu_test.cu -ldl
// (or the gpu tests of CMake with -DGPUMEM_BUILD_GPU_TESTS=ON).

#include "../shim/programs/app_support.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20U;

std::mutex problems_mtx;  // problems are reported from several threads
int problems = 0;
std::string first_problem;

void problem(std::string const& what) {
  std::lock_guard lock{problems_mtx};
  if (problems++ == 0) first_problem = what;
  std::fprintf(stderr, "problem: %s\n", what.c_str());
}

#define CHECK_CUDA(call)                                                                                    \
  do {                                                                                                      \
    cudaError_t const e_ = (call);                                                                          \
    if (e_ != cudaSuccess)                                                                                  \
      problem(std::string{#call} + " -> " + cudaGetErrorName(e_) + " at line " + std::to_string(__LINE__)); \
  } while (0)

#define EXPECT(cond, what)                                    \
  do {                                                        \
    if (!(cond)) problem(std::string{what} + " (" #cond ")"); \
  } while (0)

__host__ __device__ std::uint32_t word_of(std::uint32_t seed, std::size_t i) {
  std::uint32_t x = seed * 0x9E3779B1U ^ static_cast<std::uint32_t>(i) * 0x85EBCA77U ^
                    static_cast<std::uint32_t>(i >> 32U);
  x ^= x >> 15U;
  x *= 0x2C1B3C6DU;
  x ^= x >> 12U;
  return x;
}

__global__ void fill_kernel(std::uint32_t* p, std::size_t words, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += std::size_t{gridDim.x} * blockDim.x) {
    p[i] = word_of(seed, i);
  }
}

// Counts words that differ from the pattern (p may live on another device: peer access).
__global__ void check_kernel(std::uint32_t const* p, std::size_t words, std::uint32_t seed, unsigned long long* bad) {
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += std::size_t{gridDim.x} * blockDim.x) {
    if (p[i] != word_of(seed, i)) ++mine;
  }
  if (mine != 0) atomicAdd(bad, mine);
}

// Waits `delay_ns` on the GPU's clock, then writes the pattern: an owner whose last
// writes land long after the host freed the buffer.
__global__ void late_fill_kernel(std::uint32_t* p, std::size_t words, std::uint32_t seed, unsigned long long delay_ns) {
  unsigned long long start = 0;
  unsigned long long now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < delay_ns);
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += std::size_t{gridDim.x} * blockDim.x) {
    p[i] = word_of(seed, i);
  }
}

constexpr int grid = 264;
constexpr int block_threads = 256;

// Mismatching words of `p` (on any device), checked by a kernel on the current device.
unsigned long long mismatches(void const* p, std::size_t bytes, std::uint32_t seed, cudaStream_t s) {
  unsigned long long* bad = nullptr;
  CHECK_CUDA(cudaMallocAsync(&bad, sizeof *bad, s));
  CHECK_CUDA(cudaMemsetAsync(bad, 0, sizeof *bad, s));
  check_kernel<<<grid, block_threads, 0, s>>>(static_cast<std::uint32_t const*>(p), bytes / 4, seed, bad);
  CHECK_CUDA(cudaGetLastError());
  unsigned long long host = ~0ULL;
  CHECK_CUDA(cudaMemcpyAsync(&host, bad, sizeof host, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaFreeAsync(bad, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  return host;
}

void fill(void* p, std::size_t bytes, std::uint32_t seed, cudaStream_t s) {
  fill_kernel<<<grid, block_threads, 0, s>>>(static_cast<std::uint32_t*>(p), bytes / 4, seed);
  CHECK_CUDA(cudaGetLastError());
}

void late_fill(void* p, std::size_t bytes, std::uint32_t seed, cudaStream_t s, unsigned long long delay_ns) {
  late_fill_kernel<<<grid, block_threads, 0, s>>>(static_cast<std::uint32_t*>(p), bytes / 4, seed, delay_ns);
  CHECK_CUDA(cudaGetLastError());
}

int device_count() {
  int n = 0;
  CHECK_CUDA(cudaGetDeviceCount(&n));
  return n;
}

struct buffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  int device = -1;
  std::uint32_t seed = 0;
};

void threads() {
  int const n = device_count();
  EXPECT(n >= 2, "needs two GPUs");
  if (n < 2) return;
  constexpr int thread_count = 8;
  constexpr int rounds = 64;
  auto const before = app_stats();
  std::vector<std::vector<buffer>> made(thread_count);
  std::vector<std::thread> pool;
  for (int t = 0; t < thread_count; ++t) {
    pool.emplace_back([t, n, &made] {
      std::vector<cudaStream_t> streams(static_cast<std::size_t>(n));
      for (int d = 0; d < n; ++d) {
        CHECK_CUDA(cudaSetDevice(d));
        CHECK_CUDA(cudaStreamCreateWithFlags(&streams[static_cast<std::size_t>(d)], cudaStreamNonBlocking));
      }
      for (int i = 0; i < rounds; ++i) {
        int const d = (t + i) % n;
        CHECK_CUDA(cudaSetDevice(d));
        cudaStream_t const s = streams[static_cast<std::size_t>(d)];
        buffer b;
        b.bytes = (std::size_t{1024} << static_cast<unsigned>((t + 5 * i) % 14)) + 4 * static_cast<std::size_t>(i);
        b.device = d;
        b.seed = static_cast<std::uint32_t>(t * 7919 + i + 1);
        if (i % 2 == 0) {
          CHECK_CUDA(cudaMalloc(&b.p, b.bytes));
        } else {
          CHECK_CUDA(cudaMallocAsync(&b.p, b.bytes, s));
        }
        fill(b.p, b.bytes, b.seed, s);
        made[static_cast<std::size_t>(t)].push_back(b);
      }
      for (int d = 0; d < n; ++d) {
        CHECK_CUDA(cudaSetDevice(d));
        CHECK_CUDA(cudaStreamSynchronize(streams[static_cast<std::size_t>(d)]));
        CHECK_CUDA(cudaStreamDestroy(streams[static_cast<std::size_t>(d)]));
      }
    });
  }
  for (auto& th : pool) th.join();
  pool.clear();
  // Each thread checks another thread's buffers on their own device, then frees
  // each with a different device current.
  for (int t = 0; t < thread_count; ++t) {
    pool.emplace_back([t, n, &made] {
      std::vector<cudaStream_t> streams(static_cast<std::size_t>(n));
      for (int d = 0; d < n; ++d) {
        CHECK_CUDA(cudaSetDevice(d));
        CHECK_CUDA(cudaStreamCreateWithFlags(&streams[static_cast<std::size_t>(d)], cudaStreamNonBlocking));
      }
      for (buffer const& b : made[static_cast<std::size_t>((t + 1) % thread_count)]) {
        CHECK_CUDA(cudaSetDevice(b.device));
        cudaPointerAttributes a{};
        CHECK_CUDA(cudaPointerGetAttributes(&a, b.p));
        EXPECT(a.device == b.device, "a buffer reports the device it was allocated on");
        auto const bad = mismatches(b.p, b.bytes, b.seed, streams[static_cast<std::size_t>(b.device)]);
        EXPECT(bad == 0, "buffer of " + std::to_string(b.bytes) + " bytes on device " + std::to_string(b.device) +
                             " kept its pattern (" + std::to_string(bad) + " words differ)");
        CHECK_CUDA(cudaSetDevice((b.device + 1) % n));
        CHECK_CUDA(cudaFree(b.p));
      }
      for (int d = 0; d < n; ++d) {
        CHECK_CUDA(cudaSetDevice(d));
        CHECK_CUDA(cudaStreamDestroy(streams[static_cast<std::size_t>(d)]));
      }
    });
  }
  for (auto& th : pool) th.join();
  auto const after = app_stats();
  if (after.mode == GPUMEM_SHIM_MODE_ACTIVE) {
    // Buffers and the checks' counters, all from the chains; all freed.
    auto const expected = 2ULL * thread_count * rounds;
    EXPECT(after.chain_allocations - before.chain_allocations == expected, "every allocation served by a chain");
    EXPECT(after.chain_frees - before.chain_frees == expected, "every allocation freed through its chain");
    EXPECT(after.passthrough_allocations == before.passthrough_allocations, "nothing passed through");
    EXPECT(after.chains == n, "one chain per device");
    EXPECT(after.double_frees == 0 && after.live_allocations == 0, "no double free, nothing live");
  }
}

void peer() {
  int const n = device_count();
  EXPECT(n >= 2, "needs two GPUs");
  if (n < 2) return;
  constexpr std::size_t bytes = 96 * MiB + 4096;
  int can[2] = {0, 0};
  CHECK_CUDA(cudaDeviceCanAccessPeer(&can[0], 0, 1));
  CHECK_CUDA(cudaDeviceCanAccessPeer(&can[1], 1, 0));
  std::printf("peer access: 0->1 %d, 1->0 %d\n", can[0], can[1]);
  cudaStream_t s[2] = {nullptr, nullptr};
  void* warm[2] = {nullptr, nullptr};
  void* sync_buf[2] = {nullptr, nullptr};
  void* async_buf[2] = {nullptr, nullptr};
  for (int d = 0; d < 2; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    if (can[d] != 0) {
      cudaError_t const e = cudaDeviceEnablePeerAccess(1 - d, 0);
      EXPECT(e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled, "peer access enabled");
      (void)cudaGetLastError();
    }
    CHECK_CUDA(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
    CHECK_CUDA(cudaMalloc(&warm[d], 3 * MiB));  // the buffers below sit inside a pool slab
    CHECK_CUDA(cudaMalloc(&sync_buf[d], bytes));
    CHECK_CUDA(cudaMallocAsync(&async_buf[d], bytes, s[d]));
    fill(sync_buf[d], bytes, 100U + static_cast<unsigned>(d), s[d]);
    CHECK_CUDA(cudaStreamSynchronize(s[d]));
  }
  // Peer copies in both directions between pooled buffers, each on the source's stream.
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaMemcpyPeerAsync(async_buf[1], 1, sync_buf[0], 0, bytes, s[0]));
  CHECK_CUDA(cudaSetDevice(1));
  CHECK_CUDA(cudaMemcpyPeerAsync(async_buf[0], 0, sync_buf[1], 1, bytes, s[1]));
  CHECK_CUDA(cudaStreamSynchronize(s[1]));
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaStreamSynchronize(s[0]));
  CHECK_CUDA(cudaSetDevice(1));
  EXPECT(mismatches(async_buf[1], bytes, 100, s[1]) == 0, "device 1 holds device 0's pattern after the peer copy");
  CHECK_CUDA(cudaSetDevice(0));
  EXPECT(mismatches(async_buf[0], bytes, 101, s[0]) == 0, "device 0 holds device 1's pattern after the peer copy");
  if (can[0] != 0 && can[1] != 0) {
    // Direct access: a kernel on each device reads the other's pooled buffer, and
    // device 1 writes into device 0's. (cudaMalloc memory: peer access reaches it once
    // enabled; the driver pool's cudaMallocAsync memory would also need
    // cudaMemPoolSetAccess, which a program without gpumem must call.)
    CHECK_CUDA(cudaSetDevice(0));
    EXPECT(mismatches(sync_buf[1], bytes, 101, s[0]) == 0, "a kernel on device 0 reads device 1's pooled buffer");
    CHECK_CUDA(cudaSetDevice(1));
    EXPECT(mismatches(sync_buf[0], bytes, 100, s[1]) == 0, "a kernel on device 1 reads device 0's pooled buffer");
    fill(sync_buf[0], bytes, 555, s[1]);
    CHECK_CUDA(cudaStreamSynchronize(s[1]));
    CHECK_CUDA(cudaSetDevice(0));
    EXPECT(mismatches(sync_buf[0], bytes, 555, s[0]) == 0, "device 1's kernel wrote into device 0's pooled buffer");
  } else {
    std::printf("SKIP direct peer access: cudaDeviceCanAccessPeer says no\n");
  }
  for (int d = 0; d < 2; ++d) {
    CHECK_CUDA(cudaSetDevice(1 - d));  // freed with the other device current
    CHECK_CUDA(cudaFree(warm[d]));
    CHECK_CUDA(cudaFree(sync_buf[d]));
    CHECK_CUDA(cudaSetDevice(d));  // a stream-ordered free on the stream's own device
    CHECK_CUDA(cudaFreeAsync(async_buf[d], s[d]));
  }
  for (int d = 0; d < 2; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaStreamSynchronize(s[d]));
    CHECK_CUDA(cudaStreamDestroy(s[d]));
  }
  auto const st = app_stats();
  if (st.mode == GPUMEM_SHIM_MODE_ACTIVE) {
    EXPECT(st.passthrough_allocations == 0, "every buffer came from a pool");
    EXPECT(st.live_allocations == 0 && st.double_frees == 0, "all freed once");
  }
}

struct meminfo {
  std::size_t free = 0;
  std::size_t total = 0;
};

meminfo info_of(int device) {
  meminfo m;
  CHECK_CUDA(cudaSetDevice(device));
  CHECK_CUDA(cudaMemGetInfo(&m.free, &m.total));
  return m;
}

std::string gib(std::size_t b) { return std::to_string(static_cast<double>(b) / static_cast<double>(1ULL << 30U)); }

// Default pool: what the pool caches counts as free on its own device only.
void meminfo_follows_the_pool() {
  int const n = device_count();
  EXPECT(n >= 2, "needs two GPUs");
  if (n < 2) return;
  constexpr std::size_t big = std::size_t{4} << 30U;
  constexpr std::size_t slack = 256 * MiB;  // other processes, driver bookkeeping
  for (int d = 0; d < 2; ++d) {
    meminfo const start = info_of(d);
    meminfo const other_start = info_of(1 - d);
    CHECK_CUDA(cudaSetDevice(d));
    void* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, big));
    cudaStream_t s = nullptr;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    fill(p, big, 9, s);
    CHECK_CUDA(cudaStreamSynchronize(s));
    meminfo const held = info_of(d);
    meminfo const other_held = info_of(1 - d);
    std::printf("MEMINFO device=%d start=%zu held=%zu total=%zu\n", d, start.free, held.free, held.total);
    EXPECT(held.free + big <= start.free + slack, "device " + std::to_string(d) + ": holding 4 GiB shows as used");
    EXPECT(other_held.free + slack >= other_start.free, "the other device is not charged for it");
    CHECK_CUDA(cudaSetDevice(1 - d));
    CHECK_CUDA(cudaFree(p));  // with the other device current
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaStreamDestroy(s));
    meminfo const after = info_of(d);
    std::printf("MEMINFO device=%d after_free=%zu (pool keeps the memory; counted as free)\n", d, after.free);
    EXPECT(after.free + slack >= start.free, "device " + std::to_string(d) +
                                                 ": memory the pool caches counts as free (" + gib(after.free) +
                                                 " vs " + gib(start.free) + " GiB)");
    EXPECT(after.total == start.total, "total unchanged without a limit");
  }
}

// GPUMEM_LIMIT=cap on every device of the process.
void limit(std::size_t cap) {
  int const n = device_count();
  EXPECT(n >= 2, "needs two GPUs");
  EXPECT(cap >= 256 * MiB && cap % (64 * MiB) == 0, "limit: a multiple of 64 MiB, at least 256 MiB");
  if (n < 2 || problems != 0) return;
  constexpr std::size_t chunk = 64 * MiB;
  std::vector<std::vector<void*>> held(2);
  for (int d = 0; d < 2; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    cudaStream_t s = nullptr;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void* first = nullptr;
    CHECK_CUDA(cudaMalloc(&first, chunk));  // builds the device's chain
    meminfo const m = info_of(d);
    std::printf("MEMINFO device=%d free=%zu total=%zu\n", d, m.free, m.total);
    EXPECT(m.total == cap, "device " + std::to_string(d) + ": total is the limit");
    EXPECT(m.free == cap - chunk, "device " + std::to_string(d) + ": free is the limit minus what is held");
    held[static_cast<std::size_t>(d)].push_back(first);
    // Fill the device up to its own limit; the next chunk must fail.
    CHECK_CUDA(cudaSetDevice(d));
    for (;;) {
      void* p = nullptr;
      cudaError_t const e = cudaMalloc(&p, chunk);
      if (e != cudaSuccess) {
        EXPECT(e == cudaErrorMemoryAllocation, "past the limit: cudaErrorMemoryAllocation");
        (void)cudaGetLastError();
        break;
      }
      fill(p, chunk, static_cast<std::uint32_t>(held[static_cast<std::size_t>(d)].size()), s);
      held[static_cast<std::size_t>(d)].push_back(p);
      if (held[static_cast<std::size_t>(d)].size() > cap / chunk) break;
    }
    EXPECT(held[static_cast<std::size_t>(d)].size() == cap / chunk,
           "device " + std::to_string(d) + " holds exactly its limit (" +
               std::to_string(held[static_cast<std::size_t>(d)].size()) + " chunks of 64 MiB)");
    EXPECT(info_of(d).free == 0, "device " + std::to_string(d) + ": no free memory left under the limit");
    CHECK_CUDA(cudaStreamSynchronize(s));
    // Room for the checks' counters: the first chunk goes.
    auto& mine = held[static_cast<std::size_t>(d)];
    CHECK_CUDA(cudaFree(mine.front()));
    mine.erase(mine.begin());
    for (std::size_t i = 0; i < mine.size(); ++i) {
      EXPECT(mismatches(mine[i], chunk, static_cast<std::uint32_t>(i + 1), s) == 0,
             "a chunk under the limit kept its pattern");
    }
    CHECK_CUDA(cudaStreamDestroy(s));
  }
  // Both devices full at once: each device's own limit, not one shared.
  for (int d = 0; d < 2; ++d) {
    CHECK_CUDA(cudaSetDevice(1 - d));
    for (void* p : held[static_cast<std::size_t>(d)]) CHECK_CUDA(cudaFree(p));
  }
  for (int d = 0; d < 2; ++d) {
    meminfo const m = info_of(d);
    EXPECT(m.free == cap && m.total == cap, "device " + std::to_string(d) + ": the whole limit free again");
  }
}

// Stream-ordered calls on a stream of another device than the current one.
void foreign_stream() {
  int const n = device_count();
  EXPECT(n >= 2, "needs two GPUs");
  if (n < 2) return;
  constexpr std::size_t bytes = 64 * MiB;
  constexpr unsigned long long late = 200'000'000ULL;  // 200 ms
  int can10 = 0;
  CHECK_CUDA(cudaDeviceCanAccessPeer(&can10, 1, 0));
  cudaStream_t s0 = nullptr;   // device 0: the new owner's stream
  cudaStream_t s1 = nullptr;   // device 1: the old owner's stream
  cudaStream_t s1b = nullptr;  // device 1: the new owner's stream
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CHECK_CUDA(cudaSetDevice(1));
  CHECK_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&s1b, cudaStreamNonBlocking));

  // 1. Allocated on device 1's stream with device 0 current: device 1's memory. Its
  // owner's kernel writes late; the free is issued at once, with device 0 current.
  CHECK_CUDA(cudaSetDevice(0));
  void* a = nullptr;
  CHECK_CUDA(cudaMallocAsync(&a, bytes, s1));
  cudaPointerAttributes attr{};
  CHECK_CUDA(cudaPointerGetAttributes(&attr, a));
  EXPECT(attr.device == 1,
         "cudaMallocAsync on device 1's stream allocates on device 1 (got device " + std::to_string(attr.device) + ")");
  CHECK_CUDA(cudaSetDevice(1));
  late_fill(a, bytes, 11, s1, late);
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaFreeAsync(a, s1));
  // A new owner on device 1, synchronous: CUDA lets it have the block only after the
  // free's work, the late kernel included.
  CHECK_CUDA(cudaSetDevice(1));
  void* b = nullptr;
  CHECK_CUDA(cudaMalloc(&b, bytes));
  fill(b, bytes, 12, s1b);
  CHECK_CUDA(cudaDeviceSynchronize());
  auto const bad_b = mismatches(b, bytes, 12, s1b);
  std::printf("FOREIGN device-1 block freed on its stream with device 0 current: reused %s, %llu words differ\n",
              b == a ? "yes" : "no", bad_b);
  EXPECT(bad_b == 0, "the new owner of a block freed on device 1's stream keeps its bytes (" + std::to_string(bad_b) +
                         " words differ)");
  CHECK_CUDA(cudaFree(b));

  // 2. A block of device 0, written late by a kernel on device 1's stream (peer
  // access), freed on that stream; then a new owner on device 0.
  if (can10 == 0) {
    std::printf("SKIP foreign free of device 0's block: device 1 cannot access device 0\n");
  } else {
    CHECK_CUDA(cudaSetDevice(1));
    cudaError_t const e = cudaDeviceEnablePeerAccess(0, 0);
    EXPECT(e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled, "peer access 1->0 enabled");
    (void)cudaGetLastError();
    CHECK_CUDA(cudaSetDevice(0));
    void* c = nullptr;
    CHECK_CUDA(cudaMalloc(&c, bytes));
    CHECK_CUDA(cudaSetDevice(1));
    late_fill(c, bytes, 21, s1, late);
    CHECK_CUDA(cudaFreeAsync(c, s1));
    CHECK_CUDA(cudaSetDevice(0));
    void* d = nullptr;
    CHECK_CUDA(cudaMalloc(&d, bytes));
    fill(d, bytes, 22, s0);
    CHECK_CUDA(cudaStreamSynchronize(s0));
    CHECK_CUDA(cudaSetDevice(1));
    CHECK_CUDA(cudaStreamSynchronize(s1));
    CHECK_CUDA(cudaSetDevice(0));
    auto const bad_d = mismatches(d, bytes, 22, s0);
    std::printf("FOREIGN device-0 block freed on device 1's stream: reused %s, %llu words differ\n",
                d == c ? "yes" : "no", bad_d);
    EXPECT(bad_d == 0, "the new owner of device 0's block freed on device 1's stream keeps its bytes (" +
                           std::to_string(bad_d) + " words differ)");
    CHECK_CUDA(cudaFree(d));
  }
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaStreamDestroy(s0));
  CHECK_CUDA(cudaSetDevice(1));
  CHECK_CUDA(cudaStreamDestroy(s1));
  CHECK_CUDA(cudaStreamDestroy(s1b));
  auto const st = app_stats();
  if (st.mode == GPUMEM_SHIM_MODE_ACTIVE) {
    EXPECT(st.passthrough_allocations == 0, "every buffer came from a pool");
    EXPECT(st.live_allocations == 0 && st.double_frees == 0, "all freed once");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string const scenario = argc > 1 ? argv[1] : "";
  if (scenario == "threads") {
    threads();
  } else if (scenario == "peer") {
    peer();
  } else if (scenario == "meminfo") {
    meminfo_follows_the_pool();
  } else if (scenario == "foreign-stream") {
    foreign_stream();
  } else if (scenario == "limit" && argc > 2) {
    limit(std::strtoull(argv[2], nullptr, 10));
  } else {
    std::fprintf(stderr, "usage: %s threads | peer | meminfo | foreign-stream | limit BYTES\n", argv[0]);
    return 2;
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  app_print_stats();
  if (problems == 0) {
    std::printf("PASS %s\n", scenario.c_str());
  } else {
    std::printf("FAIL %s: %d problem(s); first: %s\n", scenario.c_str(), problems, first_problem.c_str());
  }
  return problems == 0 ? 0 : 1;
}
