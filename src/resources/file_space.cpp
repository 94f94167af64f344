#include <gpumem/detail/file_space.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

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

void populate_for_writing(void* p, std::size_t bytes, populate_with how) noexcept {
  if (how == populate_with::best && (::madvise(p, bytes, madv_populate_write) == 0 || errno != EINVAL)) return;
  auto* const word = static_cast<std::atomic<std::uint64_t>*>(p);
  std::size_t const stride = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) / sizeof *word;
  for (std::size_t i = 0; i < bytes / sizeof *word; i += stride) word[i].fetch_add(0, std::memory_order_relaxed);
}

}  // namespace gpumem::detail
