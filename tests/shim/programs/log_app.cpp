// Test program for the allocation log under hostile conditions: cudaMalloc/cudaFree
// pairs from the main thread (so every row's Thread is the pid), with the log
// truncated underneath, the file size limited, or several copies started on one
// log path. Prints "PAIRS <n> PID <pid>" and "PASS <scenario>" for the gtest driver.
//
//   shim_log_app pairs N              N pairs of 4 KiB
//   shim_log_app truncate N PATH      N pairs; PATH emptied (as ": > PATH") half way
//   shim_log_app fsize BYTES N        RLIMIT_FSIZE = BYTES (after the device is up), N pairs
//   shim_log_app sync N               waits for a byte on fd 3, N pairs, writes a
//                                     byte to fd 4, waits for EOF on fd 5

#include "app_support.h"

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

void pairs(long n) {
  for (long i = 0; i < n; ++i) {
    void* p = nullptr;
    APP_CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
    APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  }
  printf("PAIRS %ld PID %ld\n", n, static_cast<long>(getpid()));
}

}  // namespace

int main(int argc, char** argv) {
  std::string const scenario = argc > 1 ? argv[1] : "";
  long const n = argc > 2 ? std::atol(argv[scenario == "fsize" ? 3 : 2]) : 0;
  if (scenario == "pairs") {
    pairs(n);
  } else if (scenario == "truncate" && argc > 3) {
    pairs(n / 2);
    int const fd = open(argv[3], O_WRONLY | O_TRUNC);
    APP_CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    pairs(n - n / 2);
  } else if (scenario == "fsize" && argc > 3) {
    // The device first (the simulated one backs its memory with a file); the
    // limit then applies to the log, opened at the first allocation. SIGXFSZ
    // stays at its default action: exceeding the limit would kill us.
    APP_CHECK_EQ(cudaFree(nullptr), cudaSuccess);
    rlim_t const limit = std::strtoull(argv[2], nullptr, 10);
    rlimit lim{limit, limit};
    APP_CHECK_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
    pairs(n);
  } else if (scenario == "sync") {
    char c = 0;
    APP_CHECK_EQ(read(3, &c, 1), 1);
    pairs(n);
    APP_CHECK_EQ(write(4, "w", 1), 1);
    while (read(5, &c, 1) > 0) {}
  } else {
    fprintf(stderr, "usage: shim_log_app pairs N | truncate N PATH | fsize BYTES N | sync N\n");
    return 2;
  }
  return app_finish(scenario.c_str());
}
