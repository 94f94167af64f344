#include <gpumem/detail/file_space.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace gpumem::detail {

#ifdef MADV_POPULATE_WRITE
static_assert(MADV_POPULATE_WRITE == madv_populate_write);
#endif

std::uint64_t room_under_fsize_limit(std::uint64_t size) noexcept {
  rlimit lim{};
  if (::getrlimit(RLIMIT_FSIZE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return lim.rlim_cur > size ? lim.rlim_cur - size : 0;
}

int allocate_file(int fd, std::uint64_t from, std::uint64_t len) noexcept {
  if (room_under_fsize_limit(from) < len) return EFBIG;
  int const r = ::posix_fallocate(fd, static_cast<off_t>(from), static_cast<off_t>(len));
  if (r == EOPNOTSUPP || r == ENOSYS || r == EINVAL) {  // no fallocate: size only (no reservation)
    return ::ftruncate(fd, static_cast<off_t>(from + len)) == 0 ? 0 : errno;
  }
  return r;
}

bool pwrite_all(int fd, char const* data, std::size_t len, std::uint64_t offset) noexcept {
  while (len != 0) {
    ssize_t const w = ::pwrite(fd, data, len, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    len -= static_cast<std::size_t>(w);
    offset += static_cast<std::uint64_t>(w);
  }
  return true;
}

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

void populate_for_writing(void* p, std::size_t bytes, populate_with how) noexcept {
  if (how == populate_with::best && (::madvise(p, bytes, madv_populate_write) == 0 || errno != EINVAL)) return;
  auto* const word = static_cast<std::atomic<std::uint64_t>*>(p);
  std::size_t const stride = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) / sizeof *word;
  for (std::size_t i = 0; i < bytes / sizeof *word; i += stride) word[i].fetch_add(0, std::memory_order_relaxed);
}

const char* error_text(int err) noexcept {
  const char* d = strerrordesc_np(err);
  return d != nullptr ? d : "unknown error";
}

}  // namespace gpumem::detail
