// The C library's signal calls, as far as the allocation log's SIGBUS guard
// needs them (detail/fault_overlay.hpp, detail/sigbus_mask.hpp):
//
// - sigaction, signal, bsd_signal, sysv_signal, __sysv_signal: a SIGBUS action
//   the program sets once the log's guard is installed becomes the action the
//   guard passes every fault that is not the log's to, instead of replacing the
//   guard (a handler installed after the first allocation, such as Python's
//   faulthandler.enable(), would otherwise see the log's faults as its own and
//   end the program when another program truncates the log). The program reads
//   back what it set, as without gpumem. Every other signal, and SIGBUS before
//   the guard exists, goes straight to the C library.
// - pthread_sigmask, sigprocmask: a thread that changes its mask has its SIGBUS
//   state read again before its next row (detail::sigbus_mask_changed).
//
// Not covered: actions set with the raw rt_sigaction system call (the Go
// runtime's, at its start, before any log exists) or sigset()/sigvec().
//
// Every entry is async-signal-safe once resolved; the C library's functions are
// resolved at the first call (glibc's dlsym, RTLD_NEXT from the shim).

#include <gpumem/detail/fault_overlay.hpp>
#include <gpumem/detail/real_dlsym.hpp>
#include <gpumem/detail/sigbus_mask.hpp>

#include <dlfcn.h>
#include <signal.h>

#include <atomic>
#include <cerrno>

namespace {

using sigmask_fn = int (*)(int, sigset_t const*, sigset_t*);
using signal_fn = sighandler_t (*)(int, sighandler_t);

// The C library's `name`, looked up once.
template <class Fn>
Fn libc(std::atomic<void*>& slot, const char* name) noexcept {
  void* f = slot.load(std::memory_order_acquire);
  if (f == nullptr) {
    f = gpumem::detail::real_dlsym()(RTLD_NEXT, name);
    slot.store(f, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(f);
}

std::atomic<void*> real_sigaction_slot{nullptr};
std::atomic<void*> real_pthread_sigmask_slot{nullptr};
std::atomic<void*> real_sigprocmask_slot{nullptr};
std::atomic<void*> real_signal_slot{nullptr};
std::atomic<void*> real_bsd_signal_slot{nullptr};
std::atomic<void*> real_sysv_signal_slot{nullptr};

int real_sigaction(int sig, struct sigaction const* act, struct sigaction* old) noexcept {
  auto const f = libc<gpumem::detail::sigaction_fn>(real_sigaction_slot, "sigaction");
  if (f == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return f(sig, act, old);
}

// signal() and its spellings for SIGBUS, by the C library's rules: BSD
// semantics (the handler stays, SIGBUS blocked while it runs, calls restarted)
// or System V's (one-shot, not blocked, not restarted).
sighandler_t set_sigbus_handler(sighandler_t handler, bool bsd) noexcept {
  if (handler == SIG_ERR) {
    errno = EINVAL;
    return SIG_ERR;
  }
  struct sigaction act {};
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  if (bsd) {
    sigaddset(&act.sa_mask, SIGBUS);
    act.sa_flags = SA_RESTART;
  } else {
    act.sa_flags = SA_RESETHAND | SA_NODEFER;
  }
  struct sigaction old {};
  if (gpumem::detail::sigbus_sigaction(&act, &old, &real_sigaction) != 0) return SIG_ERR;
  return old.sa_handler;
}

sighandler_t forward_signal(std::atomic<void*>& slot, const char* name, int sig, sighandler_t handler) noexcept {
  auto const f = libc<signal_fn>(slot, name);
  if (f == nullptr) {
    errno = ENOSYS;
    return SIG_ERR;
  }
  return f(sig, handler);
}

int forward_mask(std::atomic<void*>& slot, const char* name, int how, sigset_t const* set, sigset_t* old) noexcept {
  auto const f = libc<sigmask_fn>(slot, name);
  if (f == nullptr) return ENOSYS;
  int const r = f(how, set, old);
  if (set != nullptr) gpumem::detail::sigbus_mask_changed();
  return r;
}

}  // namespace

#define GPUMEM_SIGNAL_EXPORT __attribute__((visibility("default")))

extern "C" {

GPUMEM_SIGNAL_EXPORT int sigaction(int sig, struct sigaction const* __restrict act,
                                   struct sigaction* __restrict old) noexcept {
  if (sig != SIGBUS) return real_sigaction(sig, act, old);
  return gpumem::detail::sigbus_sigaction(act, old, &real_sigaction);
}

GPUMEM_SIGNAL_EXPORT sighandler_t signal(int sig, sighandler_t handler) noexcept {
  if (sig != SIGBUS) return forward_signal(real_signal_slot, "signal", sig, handler);
  return set_sigbus_handler(handler, true);
}

GPUMEM_SIGNAL_EXPORT sighandler_t bsd_signal(int sig, sighandler_t handler) noexcept {
  if (sig != SIGBUS) return forward_signal(real_bsd_signal_slot, "bsd_signal", sig, handler);
  return set_sigbus_handler(handler, true);
}

GPUMEM_SIGNAL_EXPORT sighandler_t __sysv_signal(int sig, sighandler_t handler) noexcept {
  if (sig != SIGBUS) return forward_signal(real_sysv_signal_slot, "__sysv_signal", sig, handler);
  return set_sigbus_handler(handler, false);
}

GPUMEM_SIGNAL_EXPORT sighandler_t sysv_signal(int sig, sighandler_t handler) noexcept {
  return __sysv_signal(sig, handler);
}

GPUMEM_SIGNAL_EXPORT int pthread_sigmask(int how, sigset_t const* set, sigset_t* old) noexcept {
  return forward_mask(real_pthread_sigmask_slot, "pthread_sigmask", how, set, old);
}

GPUMEM_SIGNAL_EXPORT int sigprocmask(int how, sigset_t const* set, sigset_t* old) noexcept {
  int const r = forward_mask(real_sigprocmask_slot, "sigprocmask", how, set, old);
  if (r > 0) {  // forward_mask's own failure (pthread_sigmask's convention): sigprocmask's is -1 and errno
    errno = r;
    return -1;
  }
  return r;
}

}  // extern "C"
