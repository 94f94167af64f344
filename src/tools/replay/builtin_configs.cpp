#include "builtin_configs.hpp"

#include <gpumem/config/size_parse.hpp>
#include <gpumem/detail/file_kind.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <string_view>

namespace gpumem::tools {

namespace {

// Canonical chains, small on purpose: growth sizes that keep peak reserved
// comparable to the log's own peak. Stream mode: RMM's semantics.
constexpr std::string_view stream_mode = "[gpumem]\nsync_mode = \"stream\"\n";
constexpr std::string_view binning = R"(
[[chain]]
type = "binning"
min_size = "256B"
max_size = "1MiB"
)";
constexpr std::string_view pool = R"(
[[chain]]
type = "pool"
initial_size = 0
min_growth = "2MiB"
)";
constexpr std::string_view cuda = R"(
[[chain]]
type = "cuda"
)";

// The shim's rule for GPUMEM_CONFIG (read_file in src/config/load.cpp): a pipe,
// FIFO or character device is read only while it delivers, for at most this long
// in all and this much (a FIFO nobody writes to would otherwise hang the replay,
// in open() or in read()); a directory or a block device is refused.
constexpr int stream_wait_ms = 2000;
constexpr std::size_t max_config_bytes = std::size_t{1} << 20U;

/// Closes the descriptor on every way out, the throws included.
struct fd_closer {
  int fd;
  explicit fd_closer(int f) noexcept : fd{f} {}
  fd_closer(fd_closer const&) = delete;
  fd_closer& operator=(fd_closer const&) = delete;
  ~fd_closer() { ::close(fd); }
};

std::string read_config_text(std::string const& path) {
  auto fail = [&](std::string_view why) {
    return config::config_error{fmt::format("gpumem-replay: cannot read config {}: {}", path, why)};
  };
  // O_NONBLOCK: opening a FIFO without a writer returns at once instead of waiting.
  int const fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw fail(std::strerror(errno));
  fd_closer const closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw fail(std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw fail(std::strerror(EISDIR));
  if (S_ISBLK(st.st_mode)) throw fail("it is a block device, not a file");
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
        throw fail(fmt::format(
            "it is {} and {} within {} s (a named pipe needs a writer that closes it; or use a regular file)",
            detail::file_kind(st.st_mode), text.empty() ? "nothing was written to it" : "it did not reach its end",
            stream_wait_ms / 1000));
      }
    }
    ssize_t const n = ::read(fd, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw fail(std::strerror(errno));
    }
    text.append(buf.data(), static_cast<std::size_t>(n));
    if (stream && text.size() > max_config_bytes) {
      throw fail(fmt::format("it is {} and delivered more than {} without an end", detail::file_kind(st.st_mode),
                             config::format_bytes(max_config_bytes)));
    }
  }
  return text;
}

/// A stream-mode configuration of the given chain entries, outermost first.
config::settings stream_chain(std::initializer_list<std::string_view> entries, std::string_view name) {
  std::string toml{stream_mode};
  for (std::string_view e : entries) toml += e;
  return config::parse_toml(toml, name);
}

}  // namespace

std::vector<named_config> builtin_configs() {
  std::vector<named_config> v;
  v.push_back({"default", config::parse_toml(config::default_toml(), "embedded default")});
  v.push_back({"pool", stream_chain({pool, cuda}, "built-in pool")});
  v.push_back({"binning", stream_chain({binning, pool, cuda}, "built-in binning")});
  v.push_back({"cuda", stream_chain({cuda}, "built-in cuda")});
  return v;
}

named_config load_config_file(std::string const& path) {
  return {std::filesystem::path{path}.stem().string(), config::parse_toml(read_config_text(path), path)};
}

}  // namespace gpumem::tools
