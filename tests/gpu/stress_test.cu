// The stress test of CUDA's allocation promises (docs/cuda-semantics.md, "What a
// program may rely on"), for a real GPU, with or without gpumem.
//
// N host threads, each with its own non-blocking stream, allocate 256 B .. 64 MiB
// (log-uniform) with cudaMalloc and/or cudaMallocAsync. A kernel fills each new
// buffer with a pattern of its own; before every free a long-running kernel
// (spinning first, to stay in flight) checks the pattern and counts corrupted words;
// the buffer is then freed AT ONCE, while that kernel may still run — with cudaFree
// (real CUDA synchronizes; a correct allocator must keep the block until the kernel
// finished) or cudaFreeAsync on the stream the block was last used on.
// cudaMalloc'd buffers are used on other threads' streams too, and a third of them
// are freed by another thread. Every allocation is checked against the live ranges
// for overlap.
//
//   stress_test [--threads N] [--seconds S] [--families mixed|sync|async] [--spin-us U] [--cross-frees]
//
// --cross-frees: in the mixed family, also free cudaMalloc memory with cudaFreeAsync
// and cudaMallocAsync memory with cudaFree (without it each family frees its own,
// as most programs do).
//
// Prints "corrupted_words=W overlaps=O allocations=A frees=F" and "PASS"/"FAIL";
// exits 0 only when W == 0 and O == 0 (and no CUDA call failed).
//
// Build: the GPU tests of CMake (-DGPUMEM_BUILD_GPU_TESTS=ON), or
// nvcc -O2 -std=c++20 -arch=sm_90 -o stress_test tests/gpu/stress_test.cu

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<long> cuda_failures{0};
std::atomic<char const*> first_failure{"none"};

#define CHECK_CUDA(call)                                                                      \
  do {                                                                                        \
    cudaError_t const e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                                  \
      if (cuda_failures.fetch_add(1) < 10)                                                    \
        std::fprintf(stderr, "%s -> %s at line %d\n", #call, cudaGetErrorName(e_), __LINE__); \
      char const* none = "none";                                                              \
      first_failure.compare_exchange_strong(none, #call);                                     \
    }                                                                                         \
  } while (0)

__host__ __device__ std::uint32_t word_of(std::uint32_t tag, std::size_t i) {
  std::uint32_t x = tag * 0x9E3779B1U ^ static_cast<std::uint32_t>(i) * 0x85EBCA77U;
  x ^= x >> 15U;
  return x * 0x2C1B3C6DU | 1U;  // never 0
}

__global__ void fill(std::uint32_t* p, std::size_t words, std::uint32_t tag) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    p[i] = word_of(tag, i);
  }
}

/// Spins ~spin_cycles first (the kernel stays in flight while the host frees the
/// buffer), then checks every word; counts mismatches into *bad.
__global__ void spin_then_check(std::uint32_t const* p, std::size_t words, std::uint32_t tag, long long spin_cycles,
                                unsigned long long* bad) {
  long long const start = clock64();
  while (clock64() - start < spin_cycles) {}
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    if (p[i] != word_of(tag, i)) ++mine;
  }
  if (mine != 0) atomicAdd(bad, mine);
}

unsigned grid_for(std::size_t words) {
  return static_cast<unsigned>(std::clamp<std::size_t>((words + 255) / 256, 1, 1024));
}

struct block {
  void* p{};
  std::size_t bytes{};
  std::uint32_t tag{};
  bool synchronous{};   ///< cudaMalloc (else cudaMallocAsync)
  cudaStream_t last{};  ///< the stream its last work was queued on
};

class live_ranges {
 public:
  bool add(void* p, std::size_t n) {
    auto const a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lock{m_};
    auto it = live_.upper_bound(a);
    bool ok = !(it != live_.end() && it->first < a + n);
    if (it != live_.begin() && std::prev(it)->first + std::prev(it)->second > a) ok = false;
    live_[a] = n;
    return ok;
  }
  void remove(void* p) {
    std::lock_guard lock{m_};
    live_.erase(reinterpret_cast<std::uintptr_t>(p));
  }

 private:
  std::mutex m_;
  std::map<std::uintptr_t, std::size_t> live_;
};

struct options {
  int threads = 16;
  double seconds = 10;
  std::string families = "mixed";
  double spin_us = 50;
  bool cross_frees = false;
};

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; i += 2) {
    std::string const k = argv[i];
    if (k == "--cross-frees") {
      o.cross_frees = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", k.c_str());
      return 2;
    }
    if (k == "--threads")
      o.threads = std::atoi(argv[i + 1]);
    else if (k == "--seconds")
      o.seconds = std::atof(argv[i + 1]);
    else if (k == "--families")
      o.families = argv[i + 1];
    else if (k == "--spin-us")
      o.spin_us = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr,
                   "usage: stress_test [--threads N] [--seconds S] [--families mixed|sync|async] [--spin-us U] "
                   "[--cross-frees]\n");
      return 2;
    }
  }
  if (o.families != "mixed" && o.families != "sync" && o.families != "async") {
    std::fprintf(stderr, "--families: mixed, sync or async\n");
    return 2;
  }
  CHECK_CUDA(cudaFree(nullptr));
  int clock_khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  long long const spin_cycles = static_cast<long long>(o.spin_us * 1e-6 * clock_khz * 1e3);
  unsigned long long* bad = nullptr;
  CHECK_CUDA(cudaMallocManaged(&bad, sizeof *bad));  // not device memory gpumem pools
  *bad = 0;

  std::vector<cudaStream_t> streams(static_cast<std::size_t>(o.threads));
  for (auto& s : streams) CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  live_ranges ranges;
  std::atomic<long> overlaps{0}, allocations{0}, frees{0}, ooms{0};
  std::atomic<std::uint32_t> next_tag{1};
  std::mutex handoff_mutex;
  std::deque<block> handoff;
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.seconds);

  auto const release = [&](block const& b, cudaStream_t own, bool stream_ordered) {
    std::size_t const words = b.bytes / 4;
    if (words != 0)
      spin_then_check<<<grid_for(words), 256, 0, b.last>>>(static_cast<std::uint32_t*>(b.p), words, b.tag, spin_cycles,
                                                           bad);
    CHECK_CUDA(cudaGetLastError());
    ranges.remove(b.p);  // the program's view: freed now; the kernel above may still run
    if (stream_ordered) {
      if (b.last != own) {  // order the free after the last use, as a correct program must
        cudaEvent_t ev{};
        CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        CHECK_CUDA(cudaEventRecord(ev, b.last));
        CHECK_CUDA(cudaStreamWaitEvent(own, ev, 0));
        CHECK_CUDA(cudaEventDestroy(ev));
      }
      CHECK_CUDA(cudaFreeAsync(b.p, own));
    } else {
      CHECK_CUDA(cudaFree(b.p));
    }
    frees.fetch_add(1);
  };

  std::vector<std::thread> workers;
  for (int t = 0; t < o.threads; ++t) {
    workers.emplace_back([&, t] {
      CHECK_CUDA(cudaSetDevice(0));
      std::mt19937_64 rng{static_cast<std::uint64_t>(1234 + t)};
      std::uniform_real_distribution<double> log_size{std::log2(256.0), std::log2(64.0 * 1024 * 1024)};
      std::uniform_int_distribution<int> pick{0, 99};
      std::uniform_int_distribution<int> other{0, o.threads - 1};
      cudaStream_t const own = streams[static_cast<std::size_t>(t)];
      std::vector<block> live;
      while (std::chrono::steady_clock::now() < deadline) {
        int const a = pick(rng);
        if ((a < 50 && live.size() < 4) || live.empty()) {
          bool const sync = o.families == "sync" || (o.families == "mixed" && pick(rng) < 50);
          std::size_t const bytes = (static_cast<std::size_t>(std::exp2(log_size(rng))) + 3) & ~std::size_t{3};
          void* p = nullptr;
          cudaError_t const e = sync ? cudaMalloc(&p, bytes) : cudaMallocAsync(&p, bytes, own);
          if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            ooms.fetch_add(1);
            CHECK_CUDA(cudaStreamSynchronize(own));
            continue;
          }
          CHECK_CUDA(e);
          if (e != cudaSuccess) continue;
          allocations.fetch_add(1);
          if (!ranges.add(p, bytes)) overlaps.fetch_add(1);
          // cudaMalloc'd memory may be used on any stream at once.
          cudaStream_t const use = sync ? streams[static_cast<std::size_t>(other(rng))] : own;
          std::uint32_t const tag = next_tag.fetch_add(1);
          fill<<<grid_for(bytes / 4), 256, 0, use>>>(static_cast<std::uint32_t*>(p), bytes / 4, tag);
          CHECK_CUDA(cudaGetLastError());
          live.push_back({p, bytes, tag, sync, use});
        } else if (a < 90) {
          std::size_t const k = static_cast<std::size_t>(pick(rng)) % live.size();
          block const b = live[k];
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
          if (b.synchronous && pick(rng) < 33) {
            // Another thread frees it with cudaFree: order the hand-off after our work.
            // (Bounded: a hand-off queue growing without end would hold all memory.)
            CHECK_CUDA(cudaStreamSynchronize(b.last));
            std::lock_guard lock{handoff_mutex};
            if (handoff.size() < static_cast<std::size_t>(o.threads)) {
              handoff.push_back(b);
              continue;
            }
          }
          // Each family frees its own; with --cross-frees, either way.
          bool const stream_ordered = o.cross_frees && o.families == "mixed" ? pick(rng) < 50 : !b.synchronous;
          release(b, own, stream_ordered);
        } else {
          block b{};
          {
            std::lock_guard lock{handoff_mutex};
            if (handoff.empty()) continue;
            b = handoff.front();
            handoff.pop_front();
          }
          b.last = own;  // the new holder's checks run on its stream
          release(b, own, false);
        }
      }
      for (auto const& b : live) release(b, own, !b.synchronous);  // each family its own
    });
  }
  for (auto& w : workers) w.join();
  for (auto const& b : handoff) release(b, streams[0], false);
  CHECK_CUDA(cudaDeviceSynchronize());
  for (auto& s : streams) CHECK_CUDA(cudaStreamDestroy(s));
  unsigned long long const corrupted = *bad;
  CHECK_CUDA(cudaFree(bad));
  std::printf(
      "threads=%d families=%s%s seconds=%.1f corrupted_words=%llu overlaps=%ld allocations=%ld frees=%ld "
      "ooms=%ld cuda_failures=%ld first_failure=%s\n",
      o.threads, o.families.c_str(), o.cross_frees ? "+cross" : "", o.seconds, corrupted, overlaps.load(),
      allocations.load(), frees.load(), ooms.load(), cuda_failures.load(), first_failure.load());
  bool const pass = corrupted == 0 && overlaps.load() == 0 && cuda_failures.load() == 0;
  std::printf("%s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
