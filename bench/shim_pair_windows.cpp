// The shim's cudaMalloc+cudaFree pair (or cudaMallocAsync+cudaFreeAsync) timed in
// consecutive windows of one process, each window with what the OS saw of the
// thread in it: time on a CPU, time waiting for one, and the machine's steal time.
//
// Why: on a virtual machine the same loop can run at two speeds from one window
// to the next (a busy neighbour on the physical core), while the OS sees the
// thread on its CPU the whole time. A single timed loop per process then reads as
// one speed or the other at random; windows show both, and the state each was in.
//
//   LD_PRELOAD=<build>/lib/libgpumem_shim.so bin/shim_pair_windows [--windows N]
//       [--ms M] [--size BYTES] [--streams K] [--async]
//
// K non-blocking streams are created first (safe mode's barriers join them; the
// async pair runs on the first). Prints one line per window, then the median, the
// fastest window and the share of windows within 1.25x of it. Linked against
// libcudart.so.13 (the simulated device's on a machine without a GPU).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

struct options {
  int windows = 25;
  int ms = 20;
  std::size_t size = 256;
  int streams = 16;
  bool async = false;
};

bool parse(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    auto next = [&](long& v) {
      if (i + 1 >= argc) return false;
      char* end = nullptr;
      v = std::strtol(argv[++i], &end, 10);
      return end != nullptr && *end == '\0' && v >= 0;
    };
    long v = 0;
    if (a == "--async") {
      o.async = true;
    } else if (a == "--windows" && next(v) && v > 0) {
      o.windows = static_cast<int>(v);
    } else if (a == "--ms" && next(v) && v > 0) {
      o.ms = static_cast<int>(v);
    } else if (a == "--size" && next(v) && v > 0) {
      o.size = static_cast<std::size_t>(v);
    } else if (a == "--streams" && next(v)) {
      o.streams = static_cast<int>(v);
    } else {
      std::fprintf(stderr,
                   "usage: shim_pair_windows [--windows N] [--ms M] [--size BYTES] [--streams K] [--async]\n"
                   "  (bad or unknown argument: %s)\n",
                   argv[i]);
      return false;
    }
  }
  return true;
}

// The calling thread's time on a CPU and waiting for one, in ns (0 where the
// kernel does not say).
void thread_times(long long& on_cpu, long long& waited) {
  on_cpu = waited = 0;
  std::ifstream f("/proc/thread-self/schedstat");
  f >> on_cpu >> waited;
}

// The machine's steal time so far, in clock ticks (the hypervisor ran someone else).
long long steal_ticks() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  long long v[8] = {};
  f >> cpu;
  for (auto& x : v) f >> x;
  return v[7];
}

bool check(cudaError_t e, char const* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "shim_pair_windows: %s failed: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (!parse(argc, argv, o)) return 2;
  if (!check(cudaFree(nullptr), "cudaFree(NULL)")) return 1;
  std::vector<cudaStream_t> streams(static_cast<std::size_t>(o.streams));
  for (auto& s : streams) {
    if (!check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags")) return 1;
  }
  cudaStream_t const on = o.streams > 0 ? streams[0] : nullptr;
  auto pair = [&] {
    void* p = nullptr;
    if (o.async) return cudaMallocAsync(&p, o.size, on) == cudaSuccess && cudaFreeAsync(p, on) == cudaSuccess;
    return cudaMalloc(&p, o.size) == cudaSuccess && cudaFree(p) == cudaSuccess;
  };
  for (int i = 0; i < 1000; ++i) {
    if (!pair()) {
      (void)check(cudaGetLastError(), "a warm-up pair");
      return 1;
    }
  }
  using clock = std::chrono::steady_clock;
  std::vector<double> ns(static_cast<std::size_t>(o.windows));
  for (int w = 0; w < o.windows; ++w) {
    long long cpu0 = 0, wait0 = 0, cpu1 = 0, wait1 = 0;
    thread_times(cpu0, wait0);
    long long const steal0 = steal_ticks();
    auto const t0 = clock::now();
    auto const until = t0 + std::chrono::milliseconds(o.ms);
    long pairs = 0;
    do {
      for (int i = 0; i < 256; ++i) {
        if (!pair()) {
          (void)check(cudaGetLastError(), "a timed pair");
          return 1;
        }
      }
      pairs += 256;
    } while (clock::now() < until);
    double const elapsed = std::chrono::duration<double, std::nano>(clock::now() - t0).count();
    thread_times(cpu1, wait1);
    ns[static_cast<std::size_t>(w)] = elapsed / static_cast<double>(pairs);
    std::printf("window %3d  %8.1f ns/pair  on-cpu %6.2f ms  waited %5.2f ms  steal %lld ticks\n", w,
                ns[static_cast<std::size_t>(w)], static_cast<double>(cpu1 - cpu0) / 1e6,
                static_cast<double>(wait1 - wait0) / 1e6, steal_ticks() - steal0);
  }
  if (!check(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) return 1;
  double fastest = ns[0];  // --windows is at least 1
  for (double const v : ns) fastest = std::min(fastest, v);
  std::vector<double> sorted = ns;
  std::sort(sorted.begin(), sorted.end());
  auto const near = std::count_if(ns.begin(), ns.end(), [&](double v) { return v <= 1.25 * fastest; });
  std::printf("%s %zu B: median %.1f ns/pair, fastest window %.1f, %ld of %d windows within 1.25x of it\n",
              o.async ? "cudaMallocAsync+cudaFreeAsync" : "cudaMalloc+cudaFree", o.size, sorted[sorted.size() / 2],
              fastest, static_cast<long>(near), o.windows);
  return 0;
}
