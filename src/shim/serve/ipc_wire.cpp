#include "serve/ipc_wire.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>

namespace gpumem::shim::ipc {

std::size_t socket_address(void* sockaddr_un_out, int pid, std::uint64_t token) noexcept {
  auto* a = static_cast<sockaddr_un*>(sockaddr_un_out);
  *a = sockaddr_un{};
  a->sun_family = AF_UNIX;
  // Abstract namespace (leading NUL): nothing on disk to clean up, gone with the process.
  int const n = std::snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "gpumem-ipc-%d-%016" PRIx64, pid, token);
  return offsetof(sockaddr_un, sun_path) + 1 + static_cast<std::size_t>(n);
}

bool send_message(int sock, void const* data, std::size_t bytes, int const* fds, std::size_t fd_count) noexcept {
  iovec iov{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * pages_per_message)]{};
  if (fd_count > pages_per_message) return false;
  if (fd_count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fd_count);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fd_count);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * fd_count);
  }
  ssize_t r = 0;
  do { r = ::sendmsg(sock, &msg, MSG_NOSIGNAL); } while (r < 0 && errno == EINTR);
  return r == static_cast<ssize_t>(bytes);
}

bool receive_message(int sock, void* data, std::size_t bytes, int* fds, std::size_t fd_count) noexcept {
  iovec iov{data, bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * pages_per_message)]{};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t r = 0;
  do { r = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC); } while (r < 0 && errno == EINTR);
  std::size_t got = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    std::size_t const n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    auto const* in = reinterpret_cast<int const*>(CMSG_DATA(c));
    for (std::size_t i = 0; i < n; ++i) {
      if (got < fd_count) {
        fds[got++] = in[i];
      } else {
        ::close(in[i]);
      }
    }
  }
  bool const ok = r == static_cast<ssize_t>(bytes) && got == fd_count && (msg.msg_flags & MSG_TRUNC) == 0;
  if (!ok) {
    for (std::size_t i = 0; i < got; ++i) ::close(fds[i]);
  }
  return ok;
}

}  // namespace gpumem::shim::ipc
