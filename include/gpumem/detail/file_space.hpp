#pragma once
// Disk space for the allocation log and its journal: a full disk or
// RLIMIT_FSIZE must show as an error code, never as SIGBUS or SIGXFSZ.

#include <cstddef>
#include <cstdint>

namespace gpumem::detail {

/// Bytes a file of `size` bytes may still grow by under RLIMIT_FSIZE (UINT64_MAX:
/// no limit). Growing past it raises SIGXFSZ.
[[nodiscard]] std::uint64_t room_under_fsize_limit(std::uint64_t size) noexcept;

/// Reserves file bytes [from, from + len) of `fd` now, so that a full disk fails
/// here rather than as SIGBUS on a later store through a mapping; EFBIG past
/// RLIMIT_FSIZE. Without fallocate the size is set instead. 0 or an errno value.
[[nodiscard]] int allocate_file(int fd, std::uint64_t from, std::uint64_t len) noexcept;

/// pwrite of all `len` bytes at `offset` (again after a short write or EINTR).
/// False on an error (errno says which).
[[nodiscard]] bool pwrite_all(int fd, char const* data, std::size_t len, std::uint64_t offset) noexcept;

/// madvise's MADV_POPULATE_WRITE (Linux 5.14), by number: older headers lack it.
inline constexpr int madv_populate_write = 23;
/// How populate_for_writing maps the pages: the best way the kernel offers, or
/// (tests) the fallback for kernels before 5.14.
enum class populate_with : std::uint8_t { best, stores };

/// Maps every page of [p, p + bytes), a MAP_SHARED mapping inside its file,
/// writable and dirty now, content unchanged, so that later stores take no page
/// fault: MAP_POPULATE alone leaves a shared page write-protected until its
/// first store. MADV_POPULATE_WRITE, else one atomic add of 0 per page.
void populate_for_writing(void* p, std::size_t bytes, populate_with how = populate_with::best) noexcept;

}  // namespace gpumem::detail
