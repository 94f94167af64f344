#include <gpumem/detail/quiet_io.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace gpumem::detail {

int open_for_writing(char const* path, int flags, mode_t mode) noexcept {
  int const fd = ::open(path, flags | O_NONBLOCK | O_NOCTTY, mode);
  if (fd < 0) return -1;
  if (int const fl = ::fcntl(fd, F_GETFL); fl != -1) (void)::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

ssize_t write_without_sigpipe(int fd, void const* data, std::size_t len) noexcept {
  sigset_t pipe_only;
  sigset_t old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  if (::pthread_sigmask(SIG_BLOCK, &pipe_only, &old) != 0) return ::write(fd, data, len);
  // One already pending (the program's own, blocked by it) is not ours to take.
  sigset_t pending;
  bool const was_pending = ::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  ssize_t const n = ::write(fd, data, len);
  int const err = errno;
  if (n < 0 && err == EPIPE && !was_pending) {
    timespec const now{};
    while (::sigtimedwait(&pipe_only, nullptr, &now) < 0 && errno == EINTR) {}
  }
  (void)::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return n;
}

int write_all_without_sigpipe(int fd, char const* data, std::size_t len) noexcept {
  while (len != 0) {
    ssize_t const n = write_without_sigpipe(fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    data += n;
    len -= static_cast<std::size_t>(n);
  }
  return 0;
}

const char* error_text(int err) noexcept {
  const char* d = strerrordesc_np(err);
  return d != nullptr ? d : "unknown error";
}

}  // namespace gpumem::detail
