// CUDA IPC between processes on a real GPU, with or without gpumem. Each scenario
// starts its other process by spawning itself (same environment unless said).
//
//   ipc_test exchange   this process exports pooled buffers of six sizes (1 B to
//                       64 MiB + 4 KiB) and an interprocess event; the importer child
//                       1. checks the exporter's bytes with a kernel, writes its own with a
//                          kernel queued behind a 100 ms spin, records the shared event
//                          and says so at once: the exporter's stream waits on that event
//                          (no host wait) and its check kernel must see the importer's bytes;
//                       2. queues another spin-then-write on the imports and says so; the
//                          exporter frees every buffer at once (the writes still queued)
//                          and allocates twice as many of the same sizes, fills them; after
//                          both finished, each side's bytes must be its own under gpumem
//                          (no aliasing: a free of imported memory is held back). CUDA
//                          alone promises nothing there; what it does is printed (INFO);
//                       3. the importer exits without closing; under gpumem the freed
//                          buffers come back to the pool (parked bytes 0) and their handles
//                          no longer open.
//   ipc_test orphan     the roles reversed: the child exports and, while this process has
//                       the imports open, frees everything and exits; this process's kernels
//                       still read and write the imports, then it closes them.
//   ipc_test foreign    gpumem's handle opened by a child without gpumem (LD_PRELOAD
//                       removed): prints what CUDA answers, which must be an error; then a
//                       child without gpumem exports cudaMalloc memory, and this process
//                       opens CUDA's handle, reads and writes it.
//   ipc_test cost       what an export, a first open, a repeated open and a close cost
//                       (medians), and cudaMalloc+cudaFree pairs of memory never exported,
//                       with no export live and with one live.
//   ipc_test pairs      the pairs alone (to compare shims interleaved).
//
// Each check prints "PASS name" or "FAIL name: why"; exits 0 only when all passed.
// Build: the GPU tests of CMake (-DGPUMEM_BUILD_GPU_TESTS=ON): gpu_ipc_test (static
// runtime, as nvcc builds by default) and gpu_ipc_test_shared (libcudart.so, as
// PyTorch and CuPy load it).

#include <cuda_runtime.h>

#include "../../src/shim/gpumem_shim.h"
#include "pair_cost.cuh"

#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace {

int failures = 0;

#define CHECK_CUDA(call)                                                                                          \
  do {                                                                                                            \
    cudaError_t const e_ = (call);                                                                                \
    if (e_ != cudaSuccess) {                                                                                      \
      ++failures;                                                                                                 \
      std::fprintf(stderr, "[%d] %s -> %s at line %d\n", static_cast<int>(getpid()), #call, cudaGetErrorName(e_), \
                   __LINE__);                                                                                     \
    }                                                                                                             \
  } while (0)

void verdict(bool ok, char const* name, char const* why = "") {
  std::printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name, ok ? "" : ": ", ok ? "" : why);
  std::fflush(stdout);
  if (!ok) ++failures;
}

constexpr std::size_t sizes[] = {1,
                                 4096 + 17,
                                 std::size_t{1} << 20,
                                 std::size_t{2} << 20,
                                 (std::size_t{5} << 20) + 3,
                                 (std::size_t{64} << 20) + 4096};
constexpr int buffer_count = sizeof sizes / sizeof sizes[0];

__device__ __forceinline__ unsigned char byte_of(std::size_t i, unsigned seed) {
  return static_cast<unsigned char>(((i * 2654435761U) >> 11) ^ (seed * 37U + 11U));
}

__global__ void spin(unsigned long long ns) {
  unsigned long long start = 0;
  unsigned long long now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}

__global__ void fill(unsigned char* p, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = byte_of(i, seed);
}

__global__ void check(unsigned char const* p, std::size_t n, unsigned seed, unsigned long long* bad) {
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    mine += p[i] != byte_of(i, seed) ? 1 : 0;
  if (mine != 0) atomicAdd(bad, mine);
}

void fill_on(cudaStream_t s, void* p, std::size_t n, unsigned seed) {
  fill<<<256, 256, 0, s>>>(static_cast<unsigned char*>(p), n, seed);
  CHECK_CUDA(cudaGetLastError());
}

// Bytes of [p, p + n) that differ from seed's pattern, checked by a kernel on `s`
// (after whatever `s` waits for); the host waits for `s`.
unsigned long long mismatches(cudaStream_t s, void const* p, std::size_t n, unsigned seed) {
  static unsigned long long* bad = nullptr;
  if (bad == nullptr) CHECK_CUDA(cudaMallocHost(&bad, sizeof *bad));  // not a device allocation: out of the pools
  if (bad == nullptr) return ~0ULL;
  *bad = 0;
  check<<<256, 256, 0, s>>>(static_cast<unsigned char const*>(p), n, seed, bad);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaStreamSynchronize(s));
  return *bad;
}

bool under_gpumem() { return dlsym(RTLD_DEFAULT, "gpumem_shim_get_stats") != nullptr; }

gpumem_shim_stats shim_stats() {
  gpumem_shim_stats st{};
  using fn = int (*)(gpumem_shim_stats*);
  if (auto f = reinterpret_cast<fn>(dlsym(RTLD_DEFAULT, "gpumem_shim_get_stats"))) f(&st);
  return st;
}

// ---- the other process: spawned with two pipe ends as arguments ----

struct channel {
  int in = -1;
  int out = -1;
  bool send(void const* data, std::size_t n) const { return write(out, data, n) == static_cast<ssize_t>(n); }
  bool receive(void* data, std::size_t n) const {
    auto* at = static_cast<char*>(data);
    while (n > 0) {
      ssize_t const got = read(in, at, n);
      if (got <= 0) return false;
      at += got;
      n -= static_cast<std::size_t>(got);
    }
    return true;
  }
  bool say(char c) const { return send(&c, 1); }
  bool expect(char c) const {
    char got = 0;
    return receive(&got, 1) && got == c;
  }
};

// Spawns this program with `args` and a channel to it; `plain` strips LD_PRELOAD (a
// process without gpumem).
pid_t spawn_peer(std::vector<std::string> args, channel& ch, bool plain = false) {
  int to_child[2];
  int from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return -1;
  args.push_back(std::to_string(to_child[0]));
  args.push_back(std::to_string(from_child[1]));
  std::vector<char*> argv{const_cast<char*>("/proc/self/exe")};
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!plain || std::strncmp(*e, "LD_PRELOAD=", 11) != 0) env.push_back(*e);
  }
  env.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), env.data()) != 0) pid = -1;
  close(to_child[0]);
  close(from_child[1]);
  ch = channel{from_child[0], to_child[1]};
  return pid;
}

bool exited_cleanly(pid_t pid) {
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

struct shared_buffers {
  cudaIpcMemHandle_t handles[buffer_count];
  cudaIpcEventHandle_t event;
};

// ---- exchange ----

int importer(channel const& ch, bool leave_open) {
  shared_buffers sh{};
  if (!ch.receive(&sh, sizeof sh)) return 2;
  cudaStream_t s{};
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* p[buffer_count] = {};
  for (int i = 0; i < buffer_count; ++i)
    CHECK_CUDA(cudaIpcOpenMemHandle(&p[i], sh.handles[i], cudaIpcMemLazyEnablePeerAccess));
  cudaEvent_t ev{};
  CHECK_CUDA(cudaIpcOpenEventHandle(&ev, sh.event));
  if (failures > 0) return 3;
  unsigned long long bad = 0;
  for (int i = 0; i < buffer_count; ++i) bad += mismatches(s, p[i], sizes[i], 1);
  verdict(bad == 0, "importer-reads-exporter-bytes");
  // 1: written behind a spin; the exporter learns of it only through the event.
  spin<<<1, 1, 0, s>>>(100'000'000ULL);
  for (int i = 0; i < buffer_count; ++i) fill_on(s, p[i], sizes[i], 2);
  CHECK_CUDA(cudaEventRecord(ev, s));
  ch.say('w');
  // 2: more writes queued behind a spin while the exporter frees and reallocates.
  if (!ch.expect('c')) return 4;
  spin<<<1, 1, 0, s>>>(200'000'000ULL);
  for (int i = 0; i < buffer_count; ++i) fill_on(s, p[i], sizes[i], 4);
  ch.say('q');
  CHECK_CUDA(cudaStreamSynchronize(s));
  bad = 0;
  for (int i = 0; i < buffer_count; ++i) bad += mismatches(s, p[i], sizes[i], 4);
  verdict(bad == 0, "imports-keep-their-bytes-while-the-exporter-reallocates");
  ch.say('d');
  if (!ch.expect('x')) return 5;
  CHECK_CUDA(cudaEventDestroy(ev));
  if (!leave_open) {
    for (auto q : p) CHECK_CUDA(cudaIpcCloseMemHandle(q));
  }
  CHECK_CUDA(cudaStreamDestroy(s));
  return failures == 0 ? 0 : 1;
}

// Opens `h` and reports whether it opened (the handle of memory freed since).
int stale_opener(channel const& ch) {
  cudaIpcMemHandle_t h{};
  if (!ch.receive(&h, sizeof h)) return 2;
  void* p = nullptr;
  cudaError_t const e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  (void)cudaGetLastError();
  std::printf("stale handle opens: %s\n", cudaGetErrorName(e));
  ch.say(e == cudaSuccess ? 'y' : 'n');
  if (e == cudaSuccess) CHECK_CUDA(cudaIpcCloseMemHandle(p));
  return 0;
}

void exchange() {
  cudaStream_t s{};
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* warm = nullptr;
  CHECK_CUDA(cudaMalloc(&warm, 4096));  // the buffers are blocks inside the pool, not its first
  shared_buffers sh{};
  void* p[buffer_count] = {};
  for (int i = 0; i < buffer_count; ++i) {
    CHECK_CUDA(cudaMalloc(&p[i], sizes[i]));
    fill_on(s, p[i], sizes[i], 1);
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < buffer_count; ++i) CHECK_CUDA(cudaIpcGetMemHandle(&sh.handles[i], p[i]));
  cudaEvent_t ev{};
  CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
  CHECK_CUDA(cudaIpcGetEventHandle(&sh.event, ev));
  if (failures > 0) return;
  channel ch;
  pid_t const child = spawn_peer({"importer", "leave-open"}, ch);
  ch.send(&sh, sizeof sh);
  // 1: the importer's writes, ordered by its event alone.
  bool const written = ch.expect('w');
  verdict(written, "importer-opened-the-handles");
  if (!written) {
    verdict(!exited_cleanly(child), "importer-exit");
    return;
  }
  CHECK_CUDA(cudaStreamWaitEvent(s, ev, 0));
  unsigned long long bad = 0;
  for (int i = 0; i < buffer_count; ++i) bad += mismatches(s, p[i], sizes[i], 2);
  verdict(bad == 0, "the-shared-event-orders-the-importer-writes-before-the-exporter-check");
  // 2: free everything while the importer's writes are still queued, allocate again.
  ch.say('c');
  if (!ch.expect('q')) return;
  for (auto q : p) CHECK_CUDA(cudaFree(q));
  std::size_t parked = 0;
  for (auto n : sizes) parked += n;
  if (under_gpumem()) {
    auto const st = shim_stats();
    verdict(st.ipc_parked_bytes >= parked, "frees-of-imported-buffers-are-parked");
  }
  std::vector<void*> again;
  std::vector<std::size_t> again_bytes;
  for (int round = 0; round < 2; ++round) {
    for (auto n : sizes) {
      void* q = nullptr;
      CHECK_CUDA(cudaMalloc(&q, n));
      fill_on(s, q, n, 3);
      again.push_back(q);
      again_bytes.push_back(n);
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  verdict(ch.expect('d'), "importer-finished");
  bad = 0;
  for (std::size_t i = 0; i < again.size(); ++i) bad += mismatches(s, again[i], again_bytes[i], 3);
  if (under_gpumem()) {
    verdict(bad == 0, "new-buffers-untouched-by-the-importer-writes");
  } else {  // CUDA promises nothing here: it may hand the freed memory out again at once
    std::printf("INFO CUDA alone: %llu bytes of the new buffers hold the importer's late writes\n", bad);
  }
  // 3: the importer exits without closing.
  ch.say('x');
  verdict(exited_cleanly(child), "importer-exit-without-close");
  if (under_gpumem()) {
    unsigned long long left = ~0ULL;
    for (int waited = 0; waited < 500 && left != 0; ++waited) {  // its server notices the end asynchronously
      left = shim_stats().ipc_parked_bytes;
      if (left != 0) usleep(10'000);
    }
    verdict(left == 0, "parked-buffers-return-when-the-importer-exits");
    channel sc;
    pid_t const opener = spawn_peer({"stale"}, sc);
    sc.send(&sh.handles[buffer_count - 1], sizeof sh.handles[0]);
    verdict(sc.expect('n'), "a-handle-of-freed-memory-no-longer-opens");
    verdict(exited_cleanly(opener), "stale-opener-exit");
  }
  for (auto q : again) CHECK_CUDA(cudaFree(q));
  CHECK_CUDA(cudaEventDestroy(ev));
  CHECK_CUDA(cudaFree(warm));
  CHECK_CUDA(cudaStreamDestroy(s));
}

// ---- orphan: the exporter exits while its memory is imported ----

int giver(channel const& ch) {
  cudaStream_t s{};
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* warm = nullptr;
  CHECK_CUDA(cudaMalloc(&warm, 4096));
  shared_buffers sh{};
  void* p[buffer_count] = {};
  for (int i = 0; i < buffer_count; ++i) {
    CHECK_CUDA(cudaMalloc(&p[i], sizes[i]));
    fill_on(s, p[i], sizes[i], 5);
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < buffer_count; ++i) CHECK_CUDA(cudaIpcGetMemHandle(&sh.handles[i], p[i]));
  ch.send(&sh, sizeof sh);
  if (!ch.expect('o')) return 2;
  for (auto q : p) CHECK_CUDA(cudaFree(q));  // while imported
  CHECK_CUDA(cudaFree(warm));
  return failures == 0 ? 0 : 1;  // and exit
}

void orphan() {
  channel ch;
  pid_t const child = spawn_peer({"giver"}, ch);
  shared_buffers sh{};
  bool const got = ch.receive(&sh, sizeof sh);
  verdict(got, "exporter-sent-handles");
  if (!got) return;
  cudaStream_t s{};
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* p[buffer_count] = {};
  for (int i = 0; i < buffer_count; ++i)
    CHECK_CUDA(cudaIpcOpenMemHandle(&p[i], sh.handles[i], cudaIpcMemLazyEnablePeerAccess));
  unsigned long long bad = 0;
  for (int i = 0; i < buffer_count; ++i) bad += mismatches(s, p[i], sizes[i], 5);
  verdict(bad == 0, "importer-reads-exporter-bytes");
  ch.say('o');
  verdict(exited_cleanly(child), "exporter-freed-and-exited");
  bad = 0;
  for (int i = 0; i < buffer_count; ++i) bad += mismatches(s, p[i], sizes[i], 5);
  verdict(bad == 0, "imports-outlive-the-exporter");
  for (int i = 0; i < buffer_count; ++i) fill_on(s, p[i], sizes[i], 6);
  bad = 0;
  for (int i = 0; i < buffer_count; ++i) bad += mismatches(s, p[i], sizes[i], 6);
  verdict(bad == 0, "kernels-write-orphaned-imports");
  for (auto q : p) CHECK_CUDA(cudaIpcCloseMemHandle(q));
  CHECK_CUDA(cudaStreamDestroy(s));
}

// ---- foreign: one side without gpumem ----

int plain_opener(channel const& ch) {
  cudaIpcMemHandle_t h{};
  if (!ch.receive(&h, sizeof h)) return 2;
  void* p = nullptr;
  cudaError_t const e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  std::printf("a process without gpumem opening gpumem's handle: %s (%s)\n", cudaGetErrorName(e),
              cudaGetErrorString(e));
  std::fflush(stdout);
  ch.say(e == cudaSuccess ? 'y' : 'n');
  if (e == cudaSuccess) (void)cudaIpcCloseMemHandle(p);
  return 0;
}

int plain_giver(channel const& ch) {
  void* p = nullptr;
  constexpr std::size_t n = std::size_t{3} << 20;
  CHECK_CUDA(cudaMalloc(&p, n));
  fill_on(nullptr, p, n, 7);
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h{};
  CHECK_CUDA(cudaIpcGetMemHandle(&h, p));
  ch.send(&h, sizeof h);
  if (!ch.expect('w')) return 2;
  unsigned long long const bad = mismatches(nullptr, p, n, 8);  // the importer's bytes
  ch.say(bad == 0 ? 'k' : 'b');
  CHECK_CUDA(cudaFree(p));
  return failures == 0 ? 0 : 1;
}

void foreign() {
  if (!under_gpumem()) {
    std::printf("foreign: runs under gpumem only\n");
    return;
  }
  void* warm = nullptr;
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&warm, 4096));
  CHECK_CUDA(cudaMalloc(&p, std::size_t{1} << 20));
  cudaIpcMemHandle_t h{};
  CHECK_CUDA(cudaIpcGetMemHandle(&h, p));
  channel ch;
  pid_t child = spawn_peer({"plain-opener"}, ch, true);
  ch.send(&h, sizeof h);
  verdict(ch.expect('n'), "a-process-without-gpumem-gets-an-error-for-gpumems-handle");
  verdict(exited_cleanly(child), "plain-opener-exit");
  CHECK_CUDA(cudaFree(p));
  CHECK_CUDA(cudaFree(warm));
  // CUDA's handle, from a process without gpumem: opened through CUDA.
  child = spawn_peer({"plain-giver"}, ch, true);
  cudaIpcMemHandle_t cuda_h{};
  bool const got = ch.receive(&cuda_h, sizeof cuda_h);
  void* q = nullptr;
  constexpr std::size_t n = std::size_t{3} << 20;
  if (got) CHECK_CUDA(cudaIpcOpenMemHandle(&q, cuda_h, cudaIpcMemLazyEnablePeerAccess));
  bool ok = got && q != nullptr && mismatches(nullptr, q, n, 7) == 0;
  if (q != nullptr) {
    fill_on(nullptr, q, n, 8);
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  ch.say('w');
  ok = ch.expect('k') && ok;
  verdict(ok, "cudas-own-handle-opens-under-gpumem");
  if (q != nullptr) CHECK_CUDA(cudaIpcCloseMemHandle(q));
  verdict(exited_cleanly(child), "plain-giver-exit");
}

// ---- cost ----

using clock_type = std::chrono::steady_clock;

double micros_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

constexpr std::size_t cost_sizes[] = {std::size_t{4} << 10, std::size_t{2} << 20, std::size_t{64} << 20,
                                      std::size_t{1} << 30};
constexpr int cost_count = sizeof cost_sizes / sizeof cost_sizes[0];
constexpr int cost_rounds = 15;

int cost_opener(channel const& ch) {
  cudaIpcMemHandle_t h[cost_count];
  if (!ch.receive(h, sizeof h)) return 2;
  CHECK_CUDA(cudaFree(nullptr));  // the context, outside the timings
  for (int i = 0; i < cost_count; ++i) {
    std::vector<double> open;
    std::vector<double> close;
    std::vector<double> reopen;
    double first = 0;
    for (int r = 0; r < cost_rounds; ++r) {
      void* p = nullptr;
      auto t0 = clock_type::now();
      CHECK_CUDA(cudaIpcOpenMemHandle(&p, h[i], cudaIpcMemLazyEnablePeerAccess));
      double const t = micros_since(t0);
      if (r == 0)
        first = t;  // the first import in this process: its connection, its context's first mapping
      else
        open.push_back(t);
      void* again = nullptr;
      t0 = clock_type::now();
      CHECK_CUDA(cudaIpcOpenMemHandle(&again, h[i], cudaIpcMemLazyEnablePeerAccess));  // counted, same pointer
      reopen.push_back(micros_since(t0));
      CHECK_CUDA(cudaIpcCloseMemHandle(again));
      t0 = clock_type::now();
      CHECK_CUDA(cudaIpcCloseMemHandle(p));
      close.push_back(micros_since(t0));
    }
    std::printf(
        "cost %8zu KiB: open first %9.1f us, open %9.1f us, open again (held) %7.2f us, close %9.1f us "
        "(medians of %d)\n",
        cost_sizes[i] >> 10, first, median(open), median(reopen), median(close), cost_rounds);
    std::fflush(stdout);
  }
  ch.say('e');
  return failures == 0 ? 0 : 1;
}

void pairs(char const* what) {
  time_pairs(what, [](std::size_t n) {
    void* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, n));
    CHECK_CUDA(cudaFree(p));
  });
}

void cost() {
  CHECK_CUDA(cudaFree(nullptr));
  pairs("pair, nothing exported");
  void* p[cost_count] = {};
  cudaIpcMemHandle_t h[cost_count];
  for (int i = 0; i < cost_count; ++i) {
    CHECK_CUDA(cudaMalloc(&p[i], cost_sizes[i]));
    CHECK_CUDA(cudaMemset(p[i], 0, cost_sizes[i]));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  for (int i = 0; i < cost_count; ++i) {
    auto t0 = clock_type::now();
    CHECK_CUDA(cudaIpcGetMemHandle(&h[i], p[i]));
    double const first = micros_since(t0);
    std::vector<double> again;
    for (int r = 0; r < cost_rounds; ++r) {
      cudaIpcMemHandle_t x{};
      t0 = clock_type::now();
      CHECK_CUDA(cudaIpcGetMemHandle(&x, p[i]));
      again.push_back(micros_since(t0));
    }
    std::printf("cost %8zu KiB: export first %9.1f us, export again %9.1f us (median of %d)\n", cost_sizes[i] >> 10,
                first, median(again), cost_rounds);
  }
  pairs("pair, exports live");
  channel ch;
  pid_t const child = spawn_peer({"cost-opener"}, ch);
  ch.send(h, sizeof h);
  verdict(ch.expect('e'), "cost-opener-finished");
  verdict(exited_cleanly(child), "cost-opener-exit");
  for (auto q : p) CHECK_CUDA(cudaFree(q));
}

}  // namespace

int main(int argc, char** argv) {
  std::string const what = argc > 1 ? argv[1] : "";
  auto const peer = [&](int first_fd_arg) {
    return channel{std::atoi(argv[first_fd_arg]), std::atoi(argv[first_fd_arg + 1])};
  };
  if (what == "importer" && argc == 5) return importer(peer(3), std::string{argv[2]} == "leave-open");
  if (what == "stale" && argc == 4) return stale_opener(peer(2));
  if (what == "giver" && argc == 4) return giver(peer(2));
  if (what == "plain-opener" && argc == 4) return plain_opener(peer(2));
  if (what == "plain-giver" && argc == 4) return plain_giver(peer(2));
  if (what == "cost-opener" && argc == 4) return cost_opener(peer(2));
  std::printf("ipc_test %s: pid %d, %s gpumem\n", what.c_str(), static_cast<int>(getpid()),
              under_gpumem() ? "under" : "without");
  if (what == "exchange")
    exchange();
  else if (what == "orphan")
    orphan();
  else if (what == "foreign")
    foreign();
  else if (what == "cost")
    cost();
  else if (what == "pairs")
    pairs("pair");
  else {
    std::fprintf(stderr, "usage: %s exchange|orphan|foreign|cost|pairs\n", argv[0]);
    return 2;
  }
  std::printf("%s %s (%d failures)\n", failures == 0 ? "PASS" : "FAIL", what.c_str(), failures);
  return failures == 0 ? 0 : 1;
}
