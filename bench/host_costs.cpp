// What the primitives gpumem's hot paths use cost on this host: the cycle counter,
// clock_gettime, a mutex, atomic read-modify-writes, malloc, a system call, the
// first touch of a shared file mapping (as the CSV log's), and, where a CUDA driver
// loads, the driver calls the shim makes per call or per barrier. Timings of the
// allocators and the log differ between hosts by about these ratios
// (docs/benchmarks.md).
//   bin/host_costs        (no GPU needed; x86-64 only)
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <x86intrin.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <thread>

static double now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
template <class F>
static void bench(char const* name, long n, F f) {
  for (int r = 0; r < 3; ++r) {
    double t0 = now_ns();
    for (long i = 0; i < n; ++i) f(i);
    double t1 = now_ns();
    std::printf("%-32s %8.2f ns\n", name, (t1 - t0) / n);
  }
}
volatile unsigned long long sink;

// The driver calls on gpumem's paths, if libcuda.so.1 loads and a device answers.
static void driver_costs() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::printf("%-32s (no libcuda.so.1)\n", "driver calls");
    return;
  }
  auto sym = [h](char const* name) { return dlsym(h, name); };
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(sym("cuInit"));
  auto retain = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(sym("cuDevicePrimaryCtxRetain"));
  auto set_current = reinterpret_cast<CUresult (*)(CUcontext)>(sym("cuCtxSetCurrent"));
  auto get_current = reinterpret_cast<CUresult (*)(CUcontext*)>(sym("cuCtxGetCurrent"));
  auto get_device = reinterpret_cast<CUresult (*)(CUdevice*)>(sym("cuCtxGetDevice"));
  auto stream_create = reinterpret_cast<CUresult (*)(CUstream*, unsigned)>(sym("cuStreamCreate"));
  auto event_create = reinterpret_cast<CUresult (*)(CUevent*, unsigned)>(sym("cuEventCreate"));
  auto record = reinterpret_cast<CUresult (*)(CUevent, CUstream)>(sym("cuEventRecord"));
  auto query = reinterpret_cast<CUresult (*)(CUevent)>(sym("cuEventQuery"));
  auto wait = reinterpret_cast<CUresult (*)(CUstream, CUevent, unsigned)>(sym("cuStreamWaitEvent"));
  CUcontext ctx = nullptr;
  CUstream a = nullptr, b = nullptr;
  CUevent e = nullptr;
  if (init == nullptr || init(0) != CUDA_SUCCESS || retain(&ctx, 0) != CUDA_SUCCESS ||
      set_current(ctx) != CUDA_SUCCESS || stream_create(&a, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      stream_create(&b, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      event_create(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    std::printf("%-32s (no device)\n", "driver calls");
    return;
  }
  bench("cuCtxGetCurrent", 2000000, [&](long) {
    CUcontext c = nullptr;
    sink = get_current(&c);
  });
  bench("cuCtxGetDevice", 2000000, [&](long) {
    CUdevice d = 0;
    sink = get_device(&d);
  });
  bench("cuEventRecord", 200000, [&](long) { sink = record(e, a); });
  bench("cuEventQuery (completed)", 200000, [&](long) { sink = query(e); });
  bench("cuEventRecord+cuStreamWaitEvent", 200000, [&](long) { sink = record(e, a) + wait(b, e, 0); });
}

int main() {
  std::atomic<bool> stop{false};
  std::thread idle([&] {
    while (!stop.load()) usleep(1000);
  });  // as every CUDA process has
  bench("rdtsc", 2000000, [](long) { sink = __rdtsc(); });
  bench("rdtscp", 2000000, [](long) {
    unsigned a;
    sink = __rdtscp(&a);
  });
  bench("clock_gettime MONOTONIC", 2000000, [](long) {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    sink = t.tv_nsec;
  });
  bench("clock_gettime REALTIME", 2000000, [](long) {
    timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    sink = t.tv_nsec;
  });
  bench("clock_gettime MONO_COARSE", 2000000, [](long) {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    sink = t.tv_nsec;
  });
  std::mutex m;
  bench("std::mutex lock+unlock", 5000000, [&](long) {
    m.lock();
    m.unlock();
  });
  std::atomic<long> a{0};
  bench("atomic fetch_add", 5000000, [&](long i) { a.fetch_add(i, std::memory_order_relaxed); });
  bench("atomic exchange", 5000000, [&](long i) { sink = a.exchange(i); });
  std::atomic<long> b{0};
  bench("atomic load+store(release)", 5000000,
        [&](long i) { b.store(b.load(std::memory_order_relaxed) + i, std::memory_order_release); });
  bench("malloc+free 48 B", 5000000, [&](long) {
    void* p = std::malloc(48);
    sink = (unsigned long long)p;
    std::free(p);
  });
  bench("getpid syscall", 200000, [&](long) { sink = syscall(39); });
  driver_costs();
  // Page faults of a shared file mapping, as the log's.
  char path[] = "/tmp/hostcostXXXXXX";
  int fd = mkstemp(path);
  size_t const bytes = size_t{256} << 20;
  if (ftruncate(fd, bytes) != 0) return 1;
  char* p = (char*)mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  double t0 = now_ns();
  for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
  double t1 = now_ns();
  std::printf("%-32s %8.2f ns per 4 KiB page\n", "shared file mapping first touch", (t1 - t0) / (bytes / 4096));
  t0 = now_ns();
  for (size_t i = 0; i < bytes; i += 64) p[i] = 2;
  t1 = now_ns();
  std::printf("%-32s %8.2f ns per 64 B line\n", "same mapping, touched again", (t1 - t0) / (bytes / 64));
  munmap(p, bytes);
  close(fd);
  unlink(path);
  stop = true;
  idle.join();
  FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  char buf[64] = {};
  if (f && std::fgets(buf, sizeof buf, f)) std::printf("clocksource %s", buf);
}
