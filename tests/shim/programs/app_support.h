/* Helpers for the shim's test programs (C and C++): checks that print and fail,
 * the shim's stats and the simulated device's counters, both looked up at run
 * time (a program must run unchanged without the shim or on a real GPU). */
#ifndef GPUMEM_TEST_APP_SUPPORT_H
#define GPUMEM_TEST_APP_SUPPORT_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../src/shim/gpumem_shim.h"

static int app_failures = 0;

#define APP_CHECK(cond)                                                       \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "CHECK FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      ++app_failures;                                                         \
    }                                                                         \
  } while (0)

#define APP_CHECK_EQ(a, b)                                                                                          \
  do {                                                                                                              \
    long long app_a_ = (long long)(a), app_b_ = (long long)(b);                                                     \
    if (app_a_ != app_b_) {                                                                                         \
      fprintf(stderr, "CHECK FAILED %s:%d: %s == %s (%lld vs %lld)\n", __FILE__, __LINE__, #a, #b, app_a_, app_b_); \
      ++app_failures;                                                                                               \
    }                                                                                                               \
  } while (0)

/* Zeroed stats when the shim is absent. */
static inline gpumem_shim_stats app_stats(void) {
  gpumem_shim_stats s;
  memset(&s, 0, sizeof s);
  int (*get)(gpumem_shim_stats*) = (int (*)(gpumem_shim_stats*))dlsym(RTLD_DEFAULT, "gpumem_shim_get_stats");
  if (get != NULL) get(&s);
  return s;
}

/* The managed chain's counters (zero when the shim is absent). */
static inline gpumem_shim_managed_stats app_managed_stats(void) {
  gpumem_shim_managed_stats s;
  memset(&s, 0, sizeof s);
  int (*get)(gpumem_shim_managed_stats*) = (int (*)(gpumem_shim_managed_stats*))dlsym(RTLD_DEFAULT,
                                                                                      "gpumem_shim_get_managed_stats");
  if (get != NULL) get(&s);
  return s;
}

static inline void* app_sim_symbol(const char* name) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return h != NULL ? dlsym(h, name) : NULL;
}

/* Calls of one exported driver entry point; -1 without the sim. */
static inline long app_sim_calls(const char* entry) {
  long (*f)(const char*) = (long (*)(const char*))app_sim_symbol("gpumemsim_call_count");
  return f != NULL ? f(entry) : -1;
}

static inline long app_sim_violations(void) {
  long (*f)(void) = (long (*)(void))app_sim_symbol("gpumemsim_violations");
  return f != NULL ? f() : 0;
}

/* Device memory the simulated device has handed out on `device` (allocations and
   physical memory of cuMemCreate alike); 0 without the sim. */
static inline size_t app_sim_device_bytes(int device) {
  size_t (*f)(int) = (size_t(*)(int))app_sim_symbol("gpumemsim_live_bytes");
  return f != NULL ? f(device) : 0;
}

/* After calls that hand CUDA invalid pointers on purpose: the sim counts those. */
static inline void app_sim_reset_violations(void) {
  void (*f)(void) = (void (*)(void))app_sim_symbol("gpumemsim_reset_violations");
  if (f != NULL) f();
}

/* True when the shim is serving (counts are only meaningful then). */
static inline int app_shim_active(void) { return app_stats().mode == GPUMEM_SHIM_MODE_ACTIVE; }

/* One line the gtest driver parses: "STATS key=value ...". */
static inline void app_print_stats(void) {
  gpumem_shim_stats s = app_stats();
  printf(
      "STATS mode=%d chains=%d chain_allocations=%llu runtime_allocations=%llu chain_frees=%llu "
      "passthrough_allocations=%llu passthrough_frees=%llu double_frees=%llu failed=%llu live=%llu "
      "captured=%llu barriers=%llu ipc_refused=%llu device_syncs=%llu ipc_parked=%llu sim_cuMemAlloc=%ld "
      "sim_cuMemCreate=%ld violations=%ld\n",
      s.mode, s.chains, s.chain_allocations, s.runtime_allocations, s.chain_frees, s.passthrough_allocations,
      s.passthrough_frees, s.double_frees, s.failed_allocations, s.live_allocations, s.captured_passthroughs,
      s.reclaim_barriers, s.ipc_refused, s.device_syncs, s.ipc_parked_bytes, app_sim_calls("cuMemAlloc_v2"),
      app_sim_calls("cuMemCreate"), app_sim_violations());
  fflush(stdout);
}

static inline int app_finish(const char* scenario) {
  app_print_stats();
  printf("PID %ld\n", (long)getpid());
  if (app_failures == 0) printf("PASS %s\n", scenario);
  fflush(stdout);
  return app_failures == 0 ? 0 : 1;
}

#endif
