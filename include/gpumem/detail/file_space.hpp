#pragma once
// Disk space and writes for the files gpumem writes inside other people's
// processes (the allocation log, its journal), and the text of their errors.

#include <cstddef>
#include <cstdint>

namespace gpumem::detail {

/// Allocates file bytes [from, from + len) of `fd`: blocks are reserved now, so a
/// full disk fails here (an error code) rather than as SIGBUS on a later store
/// through a mapping. Never past RLIMIT_FSIZE: growing a file beyond it raises
/// SIGXFSZ, which kills a program that did not ask for it (EFBIG instead). On a
/// file system without fallocate the size is set instead (nothing reserved).
/// 0 or an errno value.
[[nodiscard]] int allocate_file(int fd, std::uint64_t from, std::uint64_t len) noexcept;

/// Writes all `len` bytes at `offset` (pwrite, again after a short write or
/// EINTR). False on an error (errno says which).
[[nodiscard]] bool pwrite_all(int fd, char const* data, std::size_t len, std::uint64_t offset) noexcept;

/// An errno value's description for messages: untranslated and thread-safe
/// (unlike strerror), "unknown error" for a value it does not know.
[[nodiscard]] const char* error_text(int err) noexcept;

}  // namespace gpumem::detail
