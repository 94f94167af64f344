#include <gpumem/config/config_file.hpp>

#include <gpumem/config/size_parse.hpp>
#include <gpumem/detail/file_kind.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpumem::config {
namespace {

constexpr int stream_wait_ms = 2000;
constexpr std::size_t max_config_bytes = std::size_t{1} << 20U;

/// Closes the descriptor on every way out.
struct fd_closer {
  int fd;
  explicit fd_closer(int f) noexcept : fd{f} {}
  fd_closer(fd_closer const&) = delete;
  fd_closer& operator=(fd_closer const&) = delete;
  ~fd_closer() { ::close(fd); }
};

}  // namespace

std::optional<std::string> read_config_file(std::string const& path, std::string& why) {
  auto fail = [&](std::string reason) -> std::optional<std::string> {
    why = std::move(reason);
    return std::nullopt;
  };
  // O_NONBLOCK: opening a FIFO without a writer returns at once instead of waiting.
  int const fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return fail(std::strerror(errno));
  fd_closer const closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return fail(std::strerror(EISDIR));
  if (S_ISBLK(st.st_mode)) return fail("it is a block device, not a file");
  bool const stream = !S_ISREG(st.st_mode);  // FIFO, pipe (<(...)), character device (/dev/null), socket
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds{stream_wait_ms};
  std::string text;
  std::array<char, 4096> buf{};
  for (;;) {
    if (stream) {
      auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                              std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      int const r = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) {
        return fail(fmt::format(
            "it is {} and {} within {} s (a named pipe needs a writer that closes it; or use a regular file)",
            detail::file_kind(st.st_mode), text.empty() ? "nothing was written to it" : "it did not reach its end",
            stream_wait_ms / 1000));
      }
    }
    ssize_t const n = ::read(fd, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return fail(std::strerror(errno));
    }
    text.append(buf.data(), static_cast<std::size_t>(n));
    if (stream && text.size() > max_config_bytes) {
      return fail(fmt::format("it is {} and delivered more than {} without an end", detail::file_kind(st.st_mode),
                              format_bytes(max_config_bytes)));
    }
  }
  return text;
}

}  // namespace gpumem::config
