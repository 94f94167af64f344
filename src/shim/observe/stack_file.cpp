#include "observe/stack_file.hpp"

#include "shim_state.hpp"

#include <gpumem/detail/quiet_io.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpumem::shim {

stack_file::stack_file(std::string path) noexcept : path_{std::move(path)} {
  // Never waits for a FIFO's reader, never dies of SIGPIPE (whole_file.cpp).
  fd_ = detail::open_for_writing(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    error_ = errno;
    message(level::warn, "cannot write the stack table '%s': %s; the log's Stack column refers to stacks it lacks",
            path_.c_str(), std::strerror(error_));
    return;
  }
  static constexpr char version[] = "gpumem-stacks 1\n";
  (void)write_line(version, sizeof version - 1);
}

stack_file::~stack_file() {
  if (fd_ >= 0) ::close(fd_);
}

bool stack_file::write_line(char const* line, std::size_t len) noexcept {
  if (fd_ < 0) return false;
  ssize_t n = 0;
  do { n = detail::write_without_sigpipe(fd_, line, len); } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(len)) return true;
  // A short write leaves part of a line: end it, so the next line stays whole
  // (readers skip the broken one).
  if (n > 0) (void)detail::write_without_sigpipe(fd_, "\n", 1);
  if (lost_.fetch_add(1, std::memory_order_relaxed) == 0) {
    message(level::warn, "cannot write to the stack table '%s' (%s): stacks are missing from it", path_.c_str(),
            n < 0 ? std::strerror(errno) : "short write");
  }
  return false;
}

}  // namespace gpumem::shim
