#include <gpumem/detail/sigbus_mask.hpp>

#include <pthread.h>

namespace gpumem::detail {

bool this_thread_blocks_sigbus() noexcept {
  if (tl_sigbus_blocked < 0) [[unlikely]] {
    sigset_t now;
    if (::pthread_sigmask(SIG_BLOCK, nullptr, &now) != 0) return false;
    tl_sigbus_blocked = sigismember(&now, SIGBUS) == 1 ? 1 : 0;
  }
  return tl_sigbus_blocked == 1;
}

void scoped_sigbus_unblocked::unblock_if_blocked() noexcept {
  if (!this_thread_blocks_sigbus()) return;
  sigset_t bus;
  sigemptyset(&bus);
  sigaddset(&bus, SIGBUS);
  unblocked_ = ::pthread_sigmask(SIG_UNBLOCK, &bus, &saved_) == 0;
  // Let through now: a scope nested in this one costs nothing.
  if (unblocked_) tl_sigbus_blocked = 0;
}

void scoped_sigbus_unblocked::restore() noexcept {
  (void)::pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  tl_sigbus_blocked = 1;  // blocked again, as read before
}

}  // namespace gpumem::detail
