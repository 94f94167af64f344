#pragma once
// The wire between gpumem's IPC exporter and importer (ipc_sharing.hpp): the
// 64-byte handle, the socket's name and the exporter's answer. Both ends run the
// same version of gpumem; the magic's last byte names the layout.

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gpumem::shim::ipc {

inline constexpr char handle_magic[8] = {'g', 'p', 'u', 'm', 'e', 'm', 'I', '1'};

struct handle_fields {
  char magic[8];
  std::int32_t pid;          ///< the exporter
  std::int32_t device;       ///< the allocation's
  std::uint64_t token;       ///< the exporter's, random: names its socket
  std::uint64_t address;     ///< the allocation's first byte, in the exporter
  std::uint64_t bytes;       ///< its size as requested
  std::uint64_t generation;  ///< of the export: a reused address does not open
  std::uint8_t unused[16];
};
static_assert(sizeof(handle_fields) == CU_IPC_HANDLE_SIZE);

[[nodiscard]] inline bool is_gpumem_handle(CUipcMemHandle const& h) noexcept {
  return std::memcmp(h.reserved, handle_magic, sizeof handle_magic) == 0;
}
[[nodiscard]] inline handle_fields fields_of(CUipcMemHandle const& h) noexcept {
  handle_fields f{};
  std::memcpy(&f, h.reserved, sizeof f);
  return f;
}

/// The exporter's abstract socket address ("\0gpumem-ipc-<pid>-<token>"); returns
/// the length to pass to bind/connect.
[[nodiscard]] std::size_t socket_address(void* sockaddr_un_out, int pid, std::uint64_t token) noexcept;

/// The answer, one SOCK_SEQPACKET message, then the pages in messages of at most
/// pages_per_message records, each with that many descriptors (SCM_RIGHTS).
struct reply_header {
  std::int32_t status;  ///< CUresult
  std::uint32_t pages;
  std::uint64_t span;    ///< from the first page's start to the last page's end
  std::uint64_t offset;  ///< of the allocation's first byte in the span
};
struct page_record {
  std::uint64_t offset;  ///< in the span
  std::uint64_t bytes;
};
inline constexpr std::size_t pages_per_message = 64;

/// One message with `fd_count` descriptors; false on any error.
[[nodiscard]] bool send_message(int sock, void const* data, std::size_t bytes, int const* fds,
                                std::size_t fd_count) noexcept;
/// One message of exactly `bytes` bytes with exactly `fd_count` descriptors
/// (received ones are closed on a mismatch); false on any error or end of stream.
[[nodiscard]] bool receive_message(int sock, void* data, std::size_t bytes, int* fds, std::size_t fd_count) noexcept;

}  // namespace gpumem::shim::ipc
