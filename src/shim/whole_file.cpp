#include "whole_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace gpumem::shim {

int write_whole_file(char const* path, char const* data, std::size_t size) noexcept {
  int const fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  std::size_t done = 0;
  while (done < size) {
    ssize_t const n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int const err = n < 0 ? errno : EIO;
      ::close(fd);
      return err;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) return errno;
  return 0;
}

}  // namespace gpumem::shim
