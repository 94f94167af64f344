// Test program for the allocation log under hostile conditions: cudaMalloc/cudaFree
// pairs from the main thread (so every row's Thread is the pid), with the log
// truncated underneath, the file size limited, or several copies started on one
// log path; and programs that handle or block signals while the log is
// emptied, which the driver runs with and without gpumem and compares. Prints
// "PAIRS <n> PID <pid>", the signal scenarios a "SIGNALS ..." line (every
// signal's action and the thread's mask at the end), and "PASS <scenario>".
//
//   shim_log_app pairs N              N pairs of 4 KiB
//   shim_log_app truncate N PATH      N pairs; PATH emptied (as ": > PATH") half way
//   shim_log_app fsize BYTES N        RLIMIT_FSIZE = BYTES (after the device is up), N pairs
//   shim_log_app sync N               waits for a byte on fd 3, N pairs, writes a
//                                     byte to fd 4, waits for EOF on fd 5
//   shim_log_app gone N PATH          N pairs; half way PATH, its journal and its
//                                     folder are deleted
//   shim_log_app reset                5 MiB held when cudaDeviceReset releases it,
//                                     then 3 MiB allocated and freed; prints STATS
//   shim_log_app refused-free         a cudaFree refused during a stream capture,
//                                     then 1 MiB more allocated, then both freed;
//                                     prints STATS
//   (PATH, in the signal scenarios, may be any file: the same program runs without
//   gpumem too)
//   shim_log_app own-handler N PATH
//                                     N pairs; half way installs a SIGBUS handler of
//                                     its own that ends the program on any fault but
//                                     its own, empties PATH, then raises a fault of
//                                     its own and expects its handler to see it
//   shim_log_app blocked N PATH       the main thread blocks SIGBUS (as a worker thread
//                                     of a server blocks every signal), N pairs, PATH
//                                     emptied half way
//   shim_log_app gone N PATH          N pairs; half way PATH, its journal and its
//                                     folder are deleted
//   shim_log_app reset                5 MiB held when cudaDeviceReset releases it,
//                                     then 3 MiB allocated and freed; prints STATS
//   shim_log_app refused-free         a cudaFree refused during a stream capture,
//                                     then 1 MiB more allocated, then both freed;
//                                     prints STATS
//   (PATH, in the signal scenarios, may be any file: the same program runs without
//   gpumem too)
//   shim_log_app own-handler N PATH HOW
//                                     N pairs; half way installs a SIGBUS handler of
//                                     its own (HOW: sigaction, signal, sysv_signal,
//                                     sigset) that ends the program on any fault but its
//                                     own, empties PATH, then raises a fault of its own
//                                     and expects its handler to see it
//   shim_log_app blocked N PATH       the main thread blocks SIGBUS (as a worker thread
//                                     of a server blocks every signal), N pairs, PATH
//                                     emptied half way
//   shim_log_app held N PATH          N pairs; half way the main thread blocks SIGBUS
//                                     with sighold() (after its first rows), empties
//                                     PATH; then releases it with sigrelse()
//   shim_log_app ignored N PATH       N pairs; half way sigignore(SIGBUS), then PATH
//                                     emptied; the action reads back as SIG_IGN
//   shim_log_app interrupt N PATH     N pairs; half way signal(SIGBUS, h) and
//                                     siginterrupt(SIGBUS, 1), each read back (no
//                                     SA_RESTART, also for a signal() after it), PATH
//                                     emptied, then a fault of its own for h

#include "app_support.h"

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
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

void empty_file(const char* path) {
  int const fd = open(path, O_WRONLY | O_TRUNC);
  APP_CHECK(fd >= 0);
  if (fd >= 0) close(fd);
}

// The program's own SIGBUS handler: it handles faults in its own page and, like
// Python's faulthandler, treats every other one as fatal.
void* volatile own_page = nullptr;
volatile sig_atomic_t own_faults = 0;

void own_fault(void* addr) {
  auto const page = reinterpret_cast<std::uintptr_t>(own_page);
  auto const at = reinterpret_cast<std::uintptr_t>(addr);
  if (page == 0 || at < page || at >= page + 4096) {
    static char const msg[] = "FAIL: the program's SIGBUS handler got a fault that is not its own\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(3);
  }
  // Anonymous memory over the page: the store goes on there.
  void* const r = mmap(own_page, 4096, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r != own_page) _exit(4);
  own_faults = own_faults + 1;
}
void on_bus_info(int /*sig*/, siginfo_t* info, void* /*context*/) { own_fault(info->si_addr); }

// A fault of the program's own, for its handler: a store into a page of a file
// that has no byte there. Returns the page (to unmap), or nullptr if it could not
// be made (a failed check says why).
void* fault_of_its_own() {
  char name[] = "/tmp/shim_log_app_bus_XXXXXX";
  int const fd = mkstemp(name);
  APP_CHECK(fd >= 0);
  if (fd < 0) return nullptr;
  unlink(name);
  void* const p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  APP_CHECK(p != MAP_FAILED);
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  own_page = p;
  *static_cast<char volatile*>(p) = 1;
  APP_CHECK_EQ(own_faults, 1);
  return p;
}

// SIGBUS's action as the program reads it back.
struct sigaction sigbus_action() {
  struct sigaction now {};
  APP_CHECK_EQ(sigaction(SIGBUS, nullptr, &now), 0);
  return now;
}

bool own_handler_installed() {
  struct sigaction const now = sigbus_action();
  return (now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == &on_bus_info;
}

void own_handler(long n, const char* path) {
  pairs(n / 2);  // the log exists from the first pair
  struct sigaction act {};
  act.sa_sigaction = &on_bus_info;
  act.sa_flags = SA_SIGINFO;
  sigemptyset(&act.sa_mask);
  struct sigaction before {};
  APP_CHECK_EQ(sigaction(SIGBUS, &act, &before), 0);
  APP_CHECK((before.sa_flags & SA_SIGINFO) == 0 && before.sa_handler == SIG_DFL);  // the program had set none
  empty_file(path);
  pairs(n - n / 2);
  void* const p = fault_of_its_own();
  if (p == nullptr) return;
  APP_CHECK(own_handler_installed());
  munmap(p, 4096);
}

bool sigbus_blocked() {
  sigset_t now;
  APP_CHECK_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &now), 0);
  return sigismember(&now, SIGBUS) == 1;
}

void blocked(long n, const char* path) {
  sigset_t bus;
  sigemptyset(&bus);
  sigaddset(&bus, SIGBUS);
  APP_CHECK_EQ(pthread_sigmask(SIG_BLOCK, &bus, nullptr), 0);
  pairs(n / 2);
  empty_file(path);
  pairs(n - n / 2);
  APP_CHECK(sigbus_blocked());  // still blocked, as the program set it
}

// Every signal's action (DFL, IGN, the program's own handlers by name, or "other")
// with its flags, and the signals this thread blocks: what must read the same
// with and without gpumem.
void print_signals() {
  std::string line = "SIGNALS";
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction a {};
    if (sigaction(sig, nullptr, &a) != 0) continue;
    bool const info = (a.sa_flags & SA_SIGINFO) != 0;
    const char* name = "other";
    if (!info && a.sa_handler == SIG_DFL) name = "dfl";
    if (!info && a.sa_handler == SIG_IGN) name = "ign";
    if (info && a.sa_sigaction == &on_bus_info) name = "info";
    int const flags = a.sa_flags & (SA_SIGINFO | SA_RESTART | SA_RESETHAND | SA_NODEFER | SA_ONSTACK);
    line += " " + std::to_string(sig) + ":" + name + ":" + std::to_string(flags);
  }
  sigset_t mask;
  APP_CHECK_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &mask), 0);
  line += " blocked:";
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sigismember(&mask, sig) == 1) line += " " + std::to_string(sig);
  }
  printf("%s\n", line.c_str());
}

// Everything cudaDeviceReset releases is what the program held then: the log's
// books must end where the device's do (5 MiB peak, nothing live at the end).
void reset() {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  for (int i = 0; i < 5; ++i) {
    void* p = nullptr;
    APP_CHECK_EQ(cudaMalloc(&p, MiB), cudaSuccess);
  }
  APP_CHECK_EQ(cudaDeviceReset(), cudaSuccess);
  void* q[3] = {};
  for (auto& p : q) APP_CHECK_EQ(cudaMalloc(&p, MiB), cudaSuccess);
  for (auto* p : q) APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  app_print_stats();
}

// A free CUDA refuses (during a global capture) frees nothing: 2 MiB live at the
// peak, and the later real free is of a live pointer.
void refused_free() {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  cudaStream_t s = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  void* kept = nullptr;
  APP_CHECK_EQ(cudaMalloc(&kept, MiB), cudaSuccess);
  APP_CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  APP_CHECK_EQ(cudaFree(kept), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t g = nullptr;
  APP_CHECK_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  app_sim_reset_violations();  // the refused free invalidated the capture, on purpose
  void* more = nullptr;
  APP_CHECK_EQ(cudaMalloc(&more, MiB), cudaSuccess);
  APP_CHECK_EQ(cudaFree(kept), cudaSuccess);
  APP_CHECK_EQ(cudaFree(more), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
  app_print_stats();
}

}  // namespace

int main(int argc, char** argv) {
  std::string const scenario = argc > 1 ? argv[1] : "";
  long const n = argc > 2 ? std::atol(argv[scenario == "fsize" ? 3 : 2]) : 0;
  if (scenario == "pairs") {
    pairs(n);
  } else if (scenario == "truncate" && argc > 3) {
    pairs(n / 2);
    empty_file(argv[3]);
    pairs(n - n / 2);
  } else if (scenario == "own-handler" && argc > 3) {
    own_handler(n, argv[3]);
    print_signals();
  } else if (scenario == "blocked" && argc > 3) {
    blocked(n, argv[3]);
    print_signals();
  } else if (scenario == "fsize" && argc > 3) {
    // The device first (the simulated one backs its memory with a file); the
    // limit then applies to the log, opened at the first allocation. SIGXFSZ
    // stays at its default action: exceeding the limit would kill us.
    APP_CHECK_EQ(cudaFree(nullptr), cudaSuccess);
    rlim_t const limit = std::strtoull(argv[2], nullptr, 10);
    rlimit lim{limit, limit};
    APP_CHECK_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
    pairs(n);
  } else if (scenario == "gone" && argc > 3) {
    pairs(n / 2);
    std::string const log = argv[3];
    APP_CHECK_EQ(unlink(log.c_str()), 0);
    APP_CHECK_EQ(unlink((log + ".journal").c_str()), 0);
    APP_CHECK_EQ(rmdir(log.substr(0, log.rfind('/')).c_str()), 0);
    pairs(n - n / 2);
  } else if (scenario == "reset") {
    reset();
  } else if (scenario == "refused-free") {
    refused_free();
  } else if (scenario == "sync") {
    char c = 0;
    APP_CHECK_EQ(read(3, &c, 1), 1);
    pairs(n);
    APP_CHECK_EQ(write(4, "w", 1), 1);
    while (read(5, &c, 1) > 0) {}
  } else {
    fprintf(stderr,
            "usage: shim_log_app pairs N | truncate N PATH | fsize BYTES N | sync N | own-handler N PATH | "
            "blocked N PATH | gone N PATH | reset | refused-free\n");
    return 2;
  }
  return app_finish(scenario.c_str());
}
