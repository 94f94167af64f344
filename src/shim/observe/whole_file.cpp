#include "observe/whole_file.hpp"

#include <gpumem/detail/quiet_io.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace gpumem::shim {

int write_whole_file(char const* path, char const* data, std::size_t size) noexcept {
  // A FIFO without a reader fails (ENXIO) rather than hanging the exit; a
  // reader gone meanwhile fails the write (EPIPE) rather than killing the program.
  int const fd = detail::open_for_writing(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  if (int const err = detail::write_all_without_sigpipe(fd, data, size); err != 0) {
    ::close(fd);
    return err;
  }
  if (::close(fd) != 0) return errno;
  return 0;
}

}  // namespace gpumem::shim
