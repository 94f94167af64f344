// Test program for call sites: distinct, never-inlined functions allocate distinct
// sizes, so a report that names the function behind each size names it right.
//
//   shim_stack_app sites        layer_alpha_transient: 3 x 1 MiB, freed
//                               layer_beta_leak:       2 x 3 MiB, never freed
//                               layer_delta_peak:      1 x 8 MiB, live at the peak, freed
//                               layer_gamma_fails:     1 x 1 TiB, fails (cudaErrorMemoryAllocation)
//   shim_stack_app kill         the allocations of "sites", then SIGKILL itself
//   shim_stack_app oom N        under GPUMEM_LIMIT: layer_beta_leak holds 3 MiB blocks
//                               until the limit is reached, then N more failing attempts
//                               in a loop (one burst: one message, one snapshot)
//   shim_stack_app oom_after_frees N
//                               first 3 x layer_alpha_transient and 2 x
//                               layer_managed_transient (2 MiB of managed memory,
//                               freed), then "oom N": the snapshot's call sites
//                               must hold only what is still live
//   shim_stack_app distinct N   N allocations (freed at once), each from its own
//                               stack: a path of 16 levels through fan_left and
//                               fan_right (N <= 65536)
//   shim_stack_app threads N    N threads at once, 200 x layer_alpha_transient each
//   shim_stack_app jit          layer_jit_callee: 5 MiB, never freed, called through
//                               generated code that has no unwind information (a
//                               copy of the frame-pointer trampoline CPython makes for
//                               each Python function under `python -X perf`); prints
//                               "JIT <address> <size> PID <pid>" for a perf map
//   shim_stack_app jit DEPTH    the same, with DEPTH levels of layer_native_depth
//                               between layer_jit_callee and the allocation
// Prints "SITES DONE" (and "OOM <failures>") for the gtest driver.

#include "app_support.h"

#include <cuda_runtime_api.h>

#include <sys/mman.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#define STACK_APP_FN extern "C" __attribute__((noinline, noclone, used))

namespace {
std::vector<void*> kept;
}

// Each function does work after its cudaMalloc, so the call is never a tail call
// and the function's frame is on the stack the shim sees.
STACK_APP_FN void* layer_alpha_transient() {
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, std::size_t{1} << 20), cudaSuccess);
  asm volatile("" ::: "memory");
  return p;
}

STACK_APP_FN void* layer_beta_leak() {
  void* p = nullptr;
  cudaError_t const r = cudaMalloc(&p, std::size_t{3} << 20);
  asm volatile("" ::: "memory");
  return r == cudaSuccess ? p : nullptr;
}

STACK_APP_FN void* layer_delta_peak() {
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, std::size_t{8} << 20), cudaSuccess);
  asm volatile("" ::: "memory");
  return p;
}

STACK_APP_FN cudaError_t layer_gamma_fails() {
  void* p = nullptr;
  cudaError_t const r = cudaMalloc(&p, std::size_t{1} << 40);
  asm volatile("" ::: "memory");
  return r;
}

STACK_APP_FN void* layer_managed_transient() {
  void* p = nullptr;
  APP_CHECK_EQ(cudaMallocManaged(&p, std::size_t{2} << 20), cudaSuccess);
  asm volatile("" ::: "memory");
  return p;
}

// fan(16, path): the allocation's stack holds one frame of fan_left or fan_right
// per level, chosen by the bits of `path`. The side effects keep the two from
// being folded into one function.
static volatile int fan_side = 0;
STACK_APP_FN void* fan(int level, unsigned path);
STACK_APP_FN void* fan_left(int level, unsigned path) {
  void* p = fan(level, path);
  fan_side = 1;
  return p;
}
STACK_APP_FN void* fan_right(int level, unsigned path) {
  void* p = fan(level, path);
  fan_side = 2;
  return p;
}
STACK_APP_FN void* fan(int level, unsigned path) {
  void* p = nullptr;
  if (level == 0) {
    APP_CHECK_EQ(cudaMalloc(&p, 256), cudaSuccess);
  } else if ((path & 1U) != 0) {
    p = fan_left(level - 1, path >> 1U);
  } else {
    p = fan_right(level - 1, path >> 1U);
  }
  asm volatile("" ::: "memory");
  return p;
}

STACK_APP_FN void* layer_native_depth(int n) {
  void* p = nullptr;
  if (n > 0) {
    p = layer_native_depth(n - 1);
  } else {
    APP_CHECK_EQ(cudaMalloc(&p, std::size_t{5} << 20), cudaSuccess);
  }
  asm volatile("" ::: "memory");  // no tail call: each level keeps its frame
  return p;
}

static int jit_depth = 0;  ///< native frames between the generated code and the allocation

STACK_APP_FN void layer_jit_callee() {
  void* p = nullptr;
  if (jit_depth > 0) {
    p = layer_native_depth(jit_depth - 1);
  } else {
    APP_CHECK_EQ(cudaMalloc(&p, std::size_t{5} << 20), cudaSuccess);
  }
  asm volatile("" ::: "memory");
  kept.push_back(p);
}

// push %rbp; mov %rsp,%rbp; call *%rdi; pop %rbp; ret
constexpr unsigned char trampoline_code[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3};

int jit() {
#if defined(__x86_64__)
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  APP_CHECK(page != MAP_FAILED);
  if (page == MAP_FAILED) return 1;
  std::memcpy(page, trampoline_code, sizeof trampoline_code);
  APP_CHECK_EQ(mprotect(page, 4096, PROT_READ | PROT_EXEC), 0);
  auto const trampoline = reinterpret_cast<void (*)(void (*)())>(page);
  trampoline(&layer_jit_callee);
  printf("JIT %lx %zx PID %ld\n", reinterpret_cast<unsigned long>(page), sizeof trampoline_code,
         static_cast<long>(getpid()));
  return app_failures == 0 ? 0 : 1;
#else
  printf("JIT unsupported\n");
  return 0;
#endif
}

void sites() {
  for (int i = 0; i < 3; ++i) {
    void* p = layer_alpha_transient();
    APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  }
  for (int i = 0; i < 2; ++i) kept.push_back(layer_beta_leak());
  void* peak = layer_delta_peak();
  APP_CHECK_EQ(cudaFree(peak), cudaSuccess);
  APP_CHECK(layer_gamma_fails() != cudaSuccess);
  (void)cudaGetLastError();
  printf("SITES DONE\n");
  fflush(stdout);
}

int oom(long attempts) {
  for (int i = 0; i < 1000; ++i) {
    void* p = layer_beta_leak();
    if (p == nullptr) break;
    kept.push_back(p);
  }
  (void)cudaGetLastError();
  long failures = 1;  // the one that ended the loop above
  for (long i = 0; i < attempts; ++i) {
    if (layer_beta_leak() == nullptr) ++failures;
    (void)cudaGetLastError();
  }
  printf("OOM %ld HELD %zu\n", failures, kept.size());
  return 0;
}

int main(int argc, char** argv) {
  std::string const mode = argc > 1 ? argv[1] : "";
  // The device first: the first allocation then reaches the shim directly, not
  // through the runtime's own call (whose frames would make its stack another one).
  APP_CHECK_EQ(cudaFree(nullptr), cudaSuccess);
  if (mode == "sites") {
    sites();
    return app_failures == 0 ? 0 : 1;
  }
  if (mode == "kill") {
    sites();
    raise(SIGKILL);
    return 1;
  }
  if (mode == "jit") {
    if (argc > 2) jit_depth = std::atoi(argv[2]);
    return jit();
  }
  if (mode == "threads" && argc > 2) {
    std::vector<std::thread> threads;
    for (long t = 0; t < std::atol(argv[2]); ++t) {
      threads.emplace_back([] {
        for (int i = 0; i < 200; ++i) APP_CHECK_EQ(cudaFree(layer_alpha_transient()), cudaSuccess);
      });
    }
    for (auto& t : threads) t.join();
    printf("THREADS DONE\n");
    return app_failures == 0 ? 0 : 1;
  }
  if (mode == "oom" && argc > 2) return oom(std::atol(argv[2]));
  if (mode == "oom_after_frees" && argc > 2) {
    for (int i = 0; i < 3; ++i) APP_CHECK_EQ(cudaFree(layer_alpha_transient()), cudaSuccess);
    for (int i = 0; i < 2; ++i) APP_CHECK_EQ(cudaFree(layer_managed_transient()), cudaSuccess);
    return oom(std::atol(argv[2]));
  }
  if (mode == "distinct" && argc > 2) {
    long const n = std::atol(argv[2]);
    for (long i = 0; i < n; ++i) APP_CHECK_EQ(cudaFree(fan(16, static_cast<unsigned>(i))), cudaSuccess);
    printf("DISTINCT %ld\n", n);
    return app_failures == 0 ? 0 : 1;
  }
  fprintf(stderr, "usage: shim_stack_app sites | kill | oom N | oom_after_frees N | distinct N | threads N | jit\n");
  return 2;
}
