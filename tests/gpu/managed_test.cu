// Managed memory on a real GPU, with or without gpumem (GPUMEM_MANAGED_POOL=1 pools it).
//
//   managed_test queries           what CUDA answers for managed blocks of both attach
//                                  flags and several sizes (pointer attributes, range
//                                  attributes, advice, prefetch, a kernel's writes read
//                                  on the host): run it with and without gpumem and
//                                  diff the output
//   managed_test stress [--threads N] [--seconds S]
//                                  the reuse promise: blocks freed while a kernel still
//                                  reads or writes them (cudaFree waits for the device;
//                                  a pool must not hand them out before that work ran)
//   managed_test loop [--iters N]  the workload a pool is for: allocate, advise,
//                                  prefetch to the GPU, fill there, prefetch back, sum
//                                  on the host, free; prints microseconds per iteration
//                                  (median of 5 rounds) and a checksum to compare
//   managed_test cost              cudaMallocManaged + cudaFree pairs of 4 KiB .. 64 MiB
//
// stress: each thread has a non-blocking stream and a device buffer. A spinning kernel
// keeps the stream busy, then
//   - read: a managed block filled on the host is copied to the device by a kernel
//     queued behind the spin and freed at once; a new block is taken and overwritten;
//     the device copy must still hold the pattern;
//   - write: a kernel queued behind the spin writes a managed block, which is freed at
//     once; a new block is taken and filled on the host; after the stream finished,
//     the new block must still hold it.
// Prints "corrupted=W blocks=N" and PASS/FAIL; exits 0 only on PASS.
//
// Build: the GPU tests of CMake (-DGPUMEM_BUILD_GPU_TESTS=ON): gpu_managed_test (static
// runtime) and gpu_managed_test_shared (libcudart.so, as PyTorch and CuPy load it).

#include <cuda_runtime.h>

#include "pair_cost.cuh"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<long> cuda_failures{0};

#define CHECK_CUDA(call)                                                                      \
  do {                                                                                        \
    cudaError_t const e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                                  \
      if (cuda_failures.fetch_add(1) < 10)                                                    \
        std::fprintf(stderr, "%s -> %s at line %d\n", #call, cudaGetErrorName(e_), __LINE__); \
    }                                                                                         \
  } while (0)

__global__ void spin(long long cycles) {
  long long const start = clock64();
  while (clock64() - start < cycles) {}
}

__device__ __host__ std::uint32_t word_of(std::uint32_t tag, std::size_t i) {
  std::uint32_t x = tag * 0x9E3779B1U ^ static_cast<std::uint32_t>(i) * 0x85EBCA77U;
  x ^= x >> 15U;
  return x * 0x2C1B3C6DU | 1U;
}

__global__ void fill_words(std::uint32_t* p, std::size_t words, std::uint32_t tag) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    p[i] = word_of(tag, i);
  }
}

__global__ void copy_words(std::uint32_t* dst, std::uint32_t const* src, std::size_t words) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

void fill(void* p, std::size_t bytes, std::uint32_t tag) {
  auto* w = static_cast<std::uint32_t*>(p);
  for (std::size_t i = 0; i < bytes / 4; ++i) w[i] = word_of(tag, i);
}

std::size_t count_bad(void const* p, std::size_t bytes, std::uint32_t tag) {
  auto const* w = static_cast<std::uint32_t const*>(p);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < bytes / 4; ++i) bad += w[i] != word_of(tag, i) ? 1 : 0;
  return bad;
}

cudaMemLocation on_device(int id) {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeDevice;
  l.id = id;
  return l;
}

cudaMemLocation on_host() {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeHost;
  return l;
}

// What CUDA answers for managed blocks, printed without addresses so that two runs compare.
int queries() {
  struct attach {
    unsigned flags;
    char const* name;
  };
  attach const sets[] = {{cudaMemAttachGlobal, "global"}, {cudaMemAttachHost, "host"}};
  std::size_t const sizes[] = {1, 4096, 100000, std::size_t{1} << 20, (std::size_t{3} << 20) + 17};
  for (auto const& s : sets) {
    for (std::size_t n : sizes) {
      void* p = nullptr;
      cudaError_t const a = cudaMallocManaged(&p, n, s.flags);
      std::printf("%-6s %8zu alloc=%s", s.name, n, cudaGetErrorName(a));
      if (a != cudaSuccess) {
        std::printf("\n");
        continue;
      }
      cudaPointerAttributes at{};
      cudaError_t const q = cudaPointerGetAttributes(&at, static_cast<char*>(p) + n / 2);
      std::printf(" attr=%s type=%d device=%d", cudaGetErrorName(q), static_cast<int>(at.type), at.device);
      cudaError_t const adv = cudaMemAdvise(p, n, cudaMemAdviseSetPreferredLocation, on_device(0));
      cudaError_t const acc = cudaMemAdvise(p, n, cudaMemAdviseSetAccessedBy, on_device(0));
      int preferred = -7;
      cudaError_t const rq = cudaMemRangeGetAttribute(&preferred, sizeof preferred,
                                                      cudaMemRangeAttributePreferredLocation, p, n);
      std::printf(" advise=%s,%s preferred=%s:%d", cudaGetErrorName(adv), cudaGetErrorName(acc), cudaGetErrorName(rq),
                  preferred);
      cudaError_t const pf = cudaMemPrefetchAsync(p, n, on_device(0), 0, nullptr);
      std::printf(" prefetch=%s", cudaGetErrorName(pf));
      if (n >= 4096) {
        std::size_t const words = n / 4;
        fill_words<<<64, 256>>>(static_cast<std::uint32_t*>(p), words, 7);
        cudaError_t const k = cudaDeviceSynchronize();
        std::printf(" gpu_write=%s bad=%zu", cudaGetErrorName(k), count_bad(p, words * 4, 7));
      }
      std::memset(p, 0x5a, n);  // the host may write every byte
      std::printf(" free=%s\n", cudaGetErrorName(cudaFree(p)));
    }
  }
  void* p = nullptr;
  std::printf("zero-size alloc=%s null=%d\n", cudaGetErrorName(cudaMallocManaged(&p, 0)), p == nullptr ? 1 : 0);
  std::printf("bad flags=%s\n", cudaGetErrorName(cudaMallocManaged(&p, 4096, 4)));
  cudaGetLastError();  // the refusals above are expected
  return cuda_failures.load() == 0 ? 0 : 1;
}

struct stress_result {
  std::atomic<std::size_t> bad{0};
  std::atomic<std::size_t> blocks{0};
};

void stress_thread(int id, double seconds, stress_result& out) {
  constexpr std::size_t max_bytes = std::size_t{8} << 20;
  std::mt19937_64 rng(static_cast<std::uint64_t>(id) * 7919 + 1);
  std::uniform_int_distribution<int> log_size(12, 23);  // 4 KiB .. 8 MiB
  std::uniform_int_distribution<long long> spin_cycles(20'000, 400'000);
  cudaStream_t s{};
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* dev = nullptr;
  CHECK_CUDA(cudaMalloc(&dev, max_bytes));
  std::vector<std::uint32_t> back(max_bytes / 4);
  auto const end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::uint32_t tag = static_cast<std::uint32_t>(id) << 20;
  while (std::chrono::steady_clock::now() < end && cuda_failures.load() == 0) {
    std::size_t const n = std::min(max_bytes, (std::size_t{1} << log_size(rng)) + 4 * (rng() % 1024));
    std::size_t const words = n / 4;
    // Read: the source is freed while the kernel reading it waits behind the spin.
    void* src = nullptr;
    CHECK_CUDA(cudaMallocManaged(&src, n));
    if (src == nullptr) break;
    std::uint32_t const t1 = ++tag;
    fill(src, n, t1);
    spin<<<1, 1, 0, s>>>(spin_cycles(rng));
    copy_words<<<64, 256, 0, s>>>(static_cast<std::uint32_t*>(dev), static_cast<std::uint32_t*>(src), words);
    CHECK_CUDA(cudaFree(src));
    void* next = nullptr;
    CHECK_CUDA(cudaMallocManaged(&next, n));  // the same size: the freed block if a pool hands it out
    if (next != nullptr) std::memset(next, 0xff, n);
    CHECK_CUDA(cudaMemcpyAsync(back.data(), dev, words * 4, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    out.bad += count_bad(back.data(), words * 4, t1);
    // Write: the destination is freed while the kernel writing it waits behind the spin.
    void* dst = nullptr;
    CHECK_CUDA(cudaMallocManaged(&dst, n));
    spin<<<1, 1, 0, s>>>(spin_cycles(rng));
    if (dst != nullptr) fill_words<<<64, 256, 0, s>>>(static_cast<std::uint32_t*>(dst), words, ++tag);
    CHECK_CUDA(cudaFree(dst));
    void* mine = nullptr;
    CHECK_CUDA(cudaMallocManaged(&mine, n));
    std::uint32_t const t2 = ++tag;
    if (mine != nullptr) fill(mine, n, t2);
    CHECK_CUDA(cudaStreamSynchronize(s));
    if (mine != nullptr) out.bad += count_bad(mine, n, t2);
    CHECK_CUDA(cudaFree(next));
    CHECK_CUDA(cudaFree(mine));
    out.blocks += 4;
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK_CUDA(cudaFree(dev));
  CHECK_CUDA(cudaStreamDestroy(s));
}

int stress(int threads, double seconds) {
  stress_result r;
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(stress_thread, i, seconds, std::ref(r));
  for (auto& t : pool) t.join();
  bool const ok = r.bad.load() == 0 && cuda_failures.load() == 0 && r.blocks.load() > 0;
  std::printf("corrupted=%zu blocks=%zu cuda_failures=%ld\n%s\n", r.bad.load(), r.blocks.load(), cuda_failures.load(),
              ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

// One iteration of the workload: sizes cycling 64 KiB .. 16 MiB.
std::uint64_t loop_once(int i) {
  std::size_t const n = std::size_t{64} << (10 + (i % 9));
  std::size_t const words = n / 4;
  void* p = nullptr;
  CHECK_CUDA(cudaMallocManaged(&p, n));
  if (p == nullptr) return 0;
  CHECK_CUDA(cudaMemAdvise(p, n, cudaMemAdviseSetPreferredLocation, on_device(0)));
  CHECK_CUDA(cudaMemPrefetchAsync(p, n, on_device(0), 0, nullptr));
  fill_words<<<256, 256>>>(static_cast<std::uint32_t*>(p), words, static_cast<std::uint32_t>(i));
  CHECK_CUDA(cudaMemPrefetchAsync(p, n, on_host(), 0, nullptr));
  CHECK_CUDA(cudaDeviceSynchronize());
  std::uint64_t sum = 0;
  auto const* w = static_cast<std::uint32_t const*>(p);
  for (std::size_t k = 0; k < words; k += 61) sum += w[k];
  CHECK_CUDA(cudaFree(p));
  return sum;
}

int cost() {
  CHECK_CUDA(cudaFree(nullptr));  // the context first
  time_pairs("pair", [](std::size_t n) {
    void* p = nullptr;
    CHECK_CUDA(cudaMallocManaged(&p, n));
    CHECK_CUDA(cudaFree(p));
  });
  return cuda_failures.load() == 0 ? 0 : 1;
}

int loop(int iters) {
  CHECK_CUDA(cudaFree(nullptr));  // the context first
  std::uint64_t checksum = 0;
  for (int i = 0; i < 9; ++i) checksum += loop_once(i);  // warm: every size once
  std::vector<double> rounds;
  for (int round = 0; round < 5; ++round) {
    auto const t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) checksum += loop_once(i);
    rounds.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  std::sort(rounds.begin(), rounds.end());
  std::printf("loop: %.1f us per iteration (median of 5 rounds of %d), checksum %llu\n", rounds[2], iters,
              static_cast<unsigned long long>(checksum));
  return cuda_failures.load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string const mode = argc > 1 ? argv[1] : "";
  int threads = 8;
  double seconds = 5;
  int iters = 200;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string const a = argv[i];
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    if (a == "--iters") iters = std::atoi(argv[i + 1]);
  }
  if (mode == "queries") return queries();
  if (mode == "stress") return stress(std::max(1, threads), seconds);
  if (mode == "loop") return loop(std::max(1, iters));
  if (mode == "cost") return cost();
  std::fprintf(stderr, "usage: managed_test queries | stress [--threads N] [--seconds S] | loop [--iters N] | cost\n");
  return 2;
}
