#pragma once
// Threads that block SIGBUS, and the log's file mappings.
//
// A store into (or a load from) a MAP_SHARED page past the end of a truncated
// file raises SIGBUS in the thread that touched it. The log's guard catches it
// (csv_log_writer.hpp, "The file is truncated under the writer"), but only in a
// thread that lets SIGBUS through: the kernel never leaves a fault's signal
// pending, it kills the process instead. Servers commonly block every signal in
// their worker threads (one thread sigwait()s), and those threads log rows.
//
// So every gpumem path that touches a log mapping from a program's thread (a
// row's store, a queued record's store, formatting queued records) holds a
// scoped_sigbus_unblocked: for a thread that lets SIGBUS through it is one
// thread-local load; for one that blocks it, two sigmask calls around the access,
// so a fault there reaches the guard. (A SIGBUS sent with kill() during those
// nanoseconds may be delivered to that thread rather than to the one that
// waits for it.)
//
// What a thread blocks is read once (pthread_sigmask) and kept. The preloaded
// shim's pthread_sigmask and sigprocmask hooks forget it whenever the thread's
// mask changes (sigbus_mask_changed). A program that links gpumem itself and
// blocks SIGBUS in a thread after that thread logged its first row is not seen.

#include <signal.h>

namespace gpumem::detail {

/// The calling thread's SIGBUS state: -1 not read yet, 0 let through, 1 blocked.
inline thread_local signed char tl_sigbus_blocked = -1;

/// The calling thread's signal mask changed (or may have): read it again next time.
inline void sigbus_mask_changed() noexcept { tl_sigbus_blocked = -1; }

/// Whether the calling thread blocks SIGBUS (read once, then kept).
[[nodiscard]] bool this_thread_blocks_sigbus() noexcept;

/// For its scope, SIGBUS reaches the calling thread (see above).
class scoped_sigbus_unblocked {
 public:
  scoped_sigbus_unblocked() noexcept {
    if (tl_sigbus_blocked != 0) [[unlikely]]  // blocked, or not read yet
      unblock_if_blocked();
  }
  ~scoped_sigbus_unblocked() {
    if (unblocked_) [[unlikely]]
      restore();
  }
  scoped_sigbus_unblocked(scoped_sigbus_unblocked const&) = delete;
  scoped_sigbus_unblocked& operator=(scoped_sigbus_unblocked const&) = delete;

 private:
  void unblock_if_blocked() noexcept;
  void restore() noexcept;

  bool unblocked_ = false;
  sigset_t saved_;  ///< the thread's mask before (valid when unblocked_)
};

}  // namespace gpumem::detail
