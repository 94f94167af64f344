// Pinned host memory on a real GPU, with or without gpumem (GPUMEM_HOST_POOL=1 pools it).
//
//   pinned_test queries [--hold 1] what CUDA answers for pinned blocks of every flag set:
//                                  run it with and without gpumem and diff the output.
//                                  --hold 1 frees every block only at the end. (The
//                                  driver packs small pinned allocations of several
//                                  flag sets into one pinned chunk, and
//                                  cuMemHostGetFlags answers with the chunk's flags:
//                                  what a block answers depends on which others are
//                                  alive, natively as under a pool that keeps them.)
//   pinned_test stress [--threads N] [--seconds S]
//                                  the reuse promise: blocks freed while an asynchronous
//                                  copy still reads or writes them (cudaFreeHost waits
//                                  for the device; a pool must not hand them out before
//                                  that copy ran)
//   pinned_test cost               cudaHostAlloc + cudaFreeHost pairs of 4 KiB .. 64 MiB
//
// stress: each thread has a non-blocking stream and a device buffer. A spinning kernel
// keeps the stream busy, then
//   - host-to-device: a pinned block filled with a pattern is copied to the device and
//     freed at once; a new block is taken and overwritten; the device copy must still
//     hold the pattern;
//   - device-to-host: a copy into a pinned block is queued and the block freed at once;
//     a new block is taken and filled with a pattern; after the stream finished, the
//     new block must still hold it (the late copy must not have landed in it).
// Prints "corrupted=W blocks=N" and PASS/FAIL; exits 0 only on PASS.
//
// Build: the GPU tests of CMake (-DGPUMEM_BUILD_GPU_TESTS=ON): gpu_pinned_test (static
// runtime, as nvcc builds by default) and gpu_pinned_test_shared (libcudart.so, as
// PyTorch and CuPy load it).

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

/// Writes `value` through a mapped block's device pointer.
__global__ void write_words(std::uint32_t* p, std::size_t words, std::uint32_t value) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    p[i] = value + static_cast<std::uint32_t>(i);
  }
}

std::uint32_t word_of(std::uint32_t tag, std::size_t i) {
  std::uint32_t x = tag * 0x9E3779B1U ^ static_cast<std::uint32_t>(i) * 0x85EBCA77U;
  x ^= x >> 15U;
  return x * 0x2C1B3C6DU | 1U;
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

// What CUDA answers for pinned blocks, printed without addresses so that two runs compare.
int queries(bool hold) {
  std::vector<void*> held;
  struct flag_set {
    unsigned flags;
    char const* name;
  };
  flag_set const sets[] = {{cudaHostAllocDefault, "default"},
                           {cudaHostAllocPortable, "portable"},
                           {cudaHostAllocMapped, "mapped"},
                           {cudaHostAllocWriteCombined, "write-combined"},
                           {cudaHostAllocMapped | cudaHostAllocPortable, "mapped|portable"}};
  std::size_t const sizes[] = {1, 4096, 100000, std::size_t{1} << 20, (std::size_t{3} << 20) + 17};
  for (auto const& s : sets) {
    for (std::size_t n : sizes) {
      void* p = nullptr;
      cudaError_t const a = cudaHostAlloc(&p, n, s.flags);
      std::printf("%-16s %8zu alloc=%s", s.name, n, cudaGetErrorName(a));
      if (a != cudaSuccess) {
        std::printf("\n");
        continue;
      }
      unsigned got = 0;
      cudaError_t const f = cudaHostGetFlags(&got, p);
      std::printf(" getflags=%s:%#x", cudaGetErrorName(f), got);
      cudaPointerAttributes at{};
      cudaError_t const q = cudaPointerGetAttributes(&at, p);
      std::printf(" attr=%s type=%d device=%d host_is_p=%d", cudaGetErrorName(q), static_cast<int>(at.type), at.device,
                  at.hostPointer == p ? 1 : 0);
      // An interior pointer answers for its block, as CUDA's own allocations do.
      cudaPointerAttributes in{};
      cudaError_t const qi = cudaPointerGetAttributes(&in, static_cast<char*>(p) + n / 2);
      std::printf(" interior=%s type=%d", cudaGetErrorName(qi), static_cast<int>(in.type));
      void* d = nullptr;
      cudaError_t const g = cudaHostGetDevicePointer(&d, p, 0);
      std::printf(" devptr=%s", cudaGetErrorName(g));
      if (g == cudaSuccess && n >= 4096) {
        // The GPU writes through the device pointer; the host must read it.
        std::size_t const words = n / 4;
        write_words<<<64, 256>>>(static_cast<std::uint32_t*>(d), words, 7);
        cudaError_t const k = cudaDeviceSynchronize();
        std::size_t bad = 0;
        for (std::size_t i = 0; i < words; ++i) bad += static_cast<std::uint32_t*>(p)[i] != 7 + i ? 1 : 0;
        std::printf(" gpu_write=%s bad=%zu", cudaGetErrorName(k), bad);
      }
      std::memset(p, 0x5a, n);  // the host may write every byte
      if (hold) {
        held.push_back(p);
        std::printf("\n");
      } else {
        std::printf(" free=%s\n", cudaGetErrorName(cudaFreeHost(p)));
      }
    }
  }
  for (void* h : held) CHECK_CUDA(cudaFreeHost(h));
  void* p = nullptr;
  std::printf("zero-size alloc=%s\n", cudaGetErrorName(cudaHostAlloc(&p, 0, 0)));
  std::printf("free(nullptr)=%s\n", cudaGetErrorName(cudaFreeHost(nullptr)));
  int on_stack = 0;
  std::printf("free(stack)=%s\n", cudaGetErrorName(cudaFreeHost(&on_stack)));
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
  void* check = nullptr;  // the thread's own block for reading the device back
  CHECK_CUDA(cudaHostAlloc(&check, max_bytes, 0));
  auto const end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::uint32_t tag = static_cast<std::uint32_t>(id) << 20;
  while (std::chrono::steady_clock::now() < end && cuda_failures.load() == 0) {
    std::size_t const n = std::min(max_bytes, (std::size_t{1} << log_size(rng)) + 4 * (rng() % 1024));
    unsigned const flags = (rng() & 1) != 0 ? cudaHostAllocPortable : cudaHostAllocDefault;
    // Host to device: the source is freed while the copy waits behind the kernel.
    void* src = nullptr;
    CHECK_CUDA(cudaHostAlloc(&src, n, flags));
    if (src == nullptr) break;
    std::uint32_t const t1 = ++tag;
    fill(src, n, t1);
    spin<<<1, 1, 0, s>>>(spin_cycles(rng));
    CHECK_CUDA(cudaMemcpyAsync(dev, src, n, cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaFreeHost(src));
    void* next = nullptr;
    CHECK_CUDA(cudaHostAlloc(&next, n, flags));  // the same size: the freed block if a pool hands it out
    if (next != nullptr) std::memset(next, 0xff, n);
    CHECK_CUDA(cudaMemcpyAsync(check, dev, n, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    out.bad += count_bad(check, n, t1);
    // Device to host: the destination is freed while the copy waits behind the kernel.
    void* dst = nullptr;
    CHECK_CUDA(cudaHostAlloc(&dst, n, flags));
    spin<<<1, 1, 0, s>>>(spin_cycles(rng));
    CHECK_CUDA(cudaMemcpyAsync(dst, dev, n, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaFreeHost(dst));
    void* mine = nullptr;
    CHECK_CUDA(cudaHostAlloc(&mine, n, flags));
    std::uint32_t const t2 = ++tag;
    if (mine != nullptr) fill(mine, n, t2);
    CHECK_CUDA(cudaStreamSynchronize(s));
    if (mine != nullptr) out.bad += count_bad(mine, n, t2);
    CHECK_CUDA(cudaFreeHost(next));
    CHECK_CUDA(cudaFreeHost(mine));
    out.blocks += 4;
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK_CUDA(cudaFreeHost(check));
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

int cost() {
  CHECK_CUDA(cudaFree(nullptr));  // the context first
  time_pairs("pair", [](std::size_t n) {
    void* p = nullptr;
    CHECK_CUDA(cudaHostAlloc(&p, n, 0));
    CHECK_CUDA(cudaFreeHost(p));
  });
  return cuda_failures.load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string const mode = argc > 1 ? argv[1] : "";
  int threads = 8;
  double seconds = 5;
  bool hold = false;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string const a = argv[i];
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    if (a == "--hold") hold = std::atoi(argv[i + 1]) != 0;
  }
  if (mode == "queries") return queries(hold);
  if (mode == "stress") return stress(std::max(1, threads), seconds);
  if (mode == "cost") return cost();
  std::fprintf(stderr, "usage: pinned_test queries [--hold 1] | stress [--threads N] [--seconds S] | cost\n");
  return 2;
}
