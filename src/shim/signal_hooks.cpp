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
// - sigset, sigignore (System V): the same for SIGBUS; the C library would set
//   the action without its exported sigaction, and so replace the guard.
// - siginterrupt(SIGBUS): changes SA_RESTART in the action the program set (the C
//   library would change it in the guard's, and the program would read back its
//   old flags), and is remembered for a later signal(SIGBUS), as the C library
//   remembers it.
// - pthread_sigmask, sigprocmask, sighold, sigrelse (and sigset's SIG_HOLD): a
//   thread that changes its mask has its SIGBUS state read again before its next
//   row (detail::sigbus_mask_changed).
//
// Not covered: actions set with the raw rt_sigaction system call (the Go
// runtime's, at its start, before any log exists) and sigvec() (gone from the C
// library's interface).
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

// The C library's `name` called with `args`; `failed`, errno ENOSYS, where it has none.
template <class R, class... Args>
R call_libc(std::atomic<void*>& slot, const char* name, R failed, Args... args) noexcept {
  auto const f = libc<R (*)(Args...)>(slot, name);
  if (f == nullptr) {
    errno = ENOSYS;
    return failed;
  }
  return f(args...);
}

std::atomic<void*> real_sigaction_slot{nullptr};
std::atomic<void*> real_pthread_sigmask_slot{nullptr};
std::atomic<void*> real_sigprocmask_slot{nullptr};
std::atomic<void*> real_signal_slot{nullptr};
std::atomic<void*> real_bsd_signal_slot{nullptr};
std::atomic<void*> real_sysv_signal_slot{nullptr};
std::atomic<void*> real_sigset_slot{nullptr};
std::atomic<void*> real_sigignore_slot{nullptr};
std::atomic<void*> real_sighold_slot{nullptr};
std::atomic<void*> real_sigrelse_slot{nullptr};
std::atomic<void*> real_siginterrupt_slot{nullptr};

// siginterrupt(SIGBUS, 1) was the last word on SIGBUS: signal() then sets it
// without SA_RESTART (the C library keeps the same per-signal flag).
std::atomic<bool> sigbus_interrupts{false};

int real_sigaction(int sig, struct sigaction const* act, struct sigaction* old) noexcept {
  return call_libc(real_sigaction_slot, "sigaction", -1, sig, act, old);
}

// The C library's rules for a SIGBUS action set without sigaction():
enum class action_style {
  bsd,        ///< signal(), bsd_signal(): the handler stays, SIGBUS blocked while it runs, calls restarted
  system_v,   ///< sysv_signal(): one-shot, not blocked, not restarted
  no_options  ///< sigset(), sigignore(): no flags, an empty mask
};

// Sets SIGBUS's action to `handler` in `style`; answers the previous handler.
sighandler_t set_sigbus_handler(sighandler_t handler, action_style style) noexcept {
  if (handler == SIG_ERR) {
    errno = EINVAL;
    return SIG_ERR;
  }
  struct sigaction act {};
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  if (style == action_style::bsd) {
    sigaddset(&act.sa_mask, SIGBUS);
    act.sa_flags = sigbus_interrupts.load(std::memory_order_relaxed) ? 0 : SA_RESTART;
  } else if (style == action_style::system_v) {
    act.sa_flags = SA_RESETHAND | SA_NODEFER;
  }
  struct sigaction old {};
  if (gpumem::detail::sigbus_sigaction(&act, &old, &real_sigaction) != 0) return SIG_ERR;
  return old.sa_handler;
}

sighandler_t forward_signal(std::atomic<void*>& slot, const char* name, int sig, sighandler_t handler) noexcept {
  return call_libc(slot, name, SIG_ERR, sig, handler);
}

int forward_mask(std::atomic<void*>& slot, const char* name, int how, sigset_t const* set, sigset_t* old) noexcept {
  auto const f = libc<sigmask_fn>(slot, name);
  if (f == nullptr) return ENOSYS;
  int const r = f(how, set, old);
  if (set != nullptr) gpumem::detail::sigbus_mask_changed();
  return r;
}

// sigprocmask() by its own convention (-1 and errno), through forward_mask.
int change_process_mask(int how, sigset_t const* set, sigset_t* old) noexcept {
  int const r = forward_mask(real_sigprocmask_slot, "sigprocmask", how, set, old);
  if (r > 0) {  // forward_mask's own failure (pthread_sigmask's convention)
    errno = r;
    return -1;
  }
  return r;
}

// sigignore, sighold, sigrelse for another signal than SIGBUS, or (`mask_changes`)
// for SIGBUS where only the mask changes.
int forward_one(std::atomic<void*>& slot, const char* name, int sig, bool mask_changes) noexcept {
  int const r = call_libc(slot, name, -1, sig);
  if (mask_changes) gpumem::detail::sigbus_mask_changed();
  return r;
}

// sigset(SIGBUS, disp) by the C library's rules: SIG_HOLD blocks SIGBUS; anything
// else becomes the action (no flags, an empty mask) and unblocks SIGBUS. Answers
// SIG_HOLD if SIGBUS was blocked, else the previous action's handler.
sighandler_t set_sigbus_sigset(sighandler_t disp) noexcept {
  if (disp == SIG_ERR) {
    errno = EINVAL;
    return SIG_ERR;
  }
  sigset_t bus;
  sigemptyset(&bus);
  sigaddset(&bus, SIGBUS);
  sigset_t was{};
  if (disp == SIG_HOLD) {
    if (change_process_mask(SIG_BLOCK, &bus, &was) != 0) return SIG_ERR;
    if (sigismember(&was, SIGBUS) == 1) return SIG_HOLD;
    struct sigaction old {};
    if (gpumem::detail::sigbus_sigaction(nullptr, &old, &real_sigaction) != 0) return SIG_ERR;
    return old.sa_handler;
  }
  sighandler_t const previous = set_sigbus_handler(disp, action_style::no_options);
  if (previous == SIG_ERR || change_process_mask(SIG_UNBLOCK, &bus, &was) != 0) return SIG_ERR;
  return sigismember(&was, SIGBUS) == 1 ? SIG_HOLD : previous;
}

// siginterrupt(SIGBUS, interrupt) by the C library's rules: SA_RESTART off (calls
// the signal interrupts fail with EINTR) or on, in the action the program set.
int set_sigbus_interrupt(bool interrupt) noexcept {
  struct sigaction act {};
  if (gpumem::detail::sigbus_sigaction(nullptr, &act, &real_sigaction) != 0) return -1;
  sigbus_interrupts.store(interrupt, std::memory_order_relaxed);
  if (interrupt) {
    act.sa_flags &= ~SA_RESTART;
  } else {
    act.sa_flags |= SA_RESTART;
  }
  return gpumem::detail::sigbus_sigaction(&act, nullptr, &real_sigaction);
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
  return set_sigbus_handler(handler, action_style::bsd);
}

GPUMEM_SIGNAL_EXPORT sighandler_t bsd_signal(int sig, sighandler_t handler) noexcept {
  if (sig != SIGBUS) return forward_signal(real_bsd_signal_slot, "bsd_signal", sig, handler);
  return set_sigbus_handler(handler, action_style::bsd);
}

GPUMEM_SIGNAL_EXPORT sighandler_t __sysv_signal(int sig, sighandler_t handler) noexcept {
  if (sig != SIGBUS) return forward_signal(real_sysv_signal_slot, "__sysv_signal", sig, handler);
  return set_sigbus_handler(handler, action_style::system_v);
}

GPUMEM_SIGNAL_EXPORT sighandler_t sysv_signal(int sig, sighandler_t handler) noexcept {
  return __sysv_signal(sig, handler);
}

GPUMEM_SIGNAL_EXPORT sighandler_t sigset(int sig, sighandler_t disp) noexcept {
  if (sig != SIGBUS) return forward_signal(real_sigset_slot, "sigset", sig, disp);
  return set_sigbus_sigset(disp);
}

GPUMEM_SIGNAL_EXPORT int sigignore(int sig) noexcept {
  if (sig != SIGBUS) return forward_one(real_sigignore_slot, "sigignore", sig, false);
  return set_sigbus_handler(SIG_IGN, action_style::no_options) == SIG_ERR ? -1 : 0;
}

GPUMEM_SIGNAL_EXPORT int siginterrupt(int sig, int interrupt) noexcept {
  if (sig != SIGBUS) return call_libc(real_siginterrupt_slot, "siginterrupt", -1, sig, interrupt);
  return set_sigbus_interrupt(interrupt != 0);
}

GPUMEM_SIGNAL_EXPORT int sighold(int sig) noexcept {
  return forward_one(real_sighold_slot, "sighold", sig, sig == SIGBUS);
}

GPUMEM_SIGNAL_EXPORT int sigrelse(int sig) noexcept {
  return forward_one(real_sigrelse_slot, "sigrelse", sig, sig == SIGBUS);
}

GPUMEM_SIGNAL_EXPORT int pthread_sigmask(int how, sigset_t const* set, sigset_t* old) noexcept {
  return forward_mask(real_pthread_sigmask_slot, "pthread_sigmask", how, set, old);
}

GPUMEM_SIGNAL_EXPORT int sigprocmask(int how, sigset_t const* set, sigset_t* old) noexcept {
  return change_process_mask(how, set, old);
}

}  // extern "C"
