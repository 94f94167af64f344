#pragma once
// Disk space and writes for the files gpumem writes inside other people's
// processes (the allocation log, its journal), and the text of their errors.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace gpumem::detail {

/// Bytes a file of `size` bytes may still grow by under RLIMIT_FSIZE (UINT64_MAX:
/// no limit): growing past it raises SIGXFSZ, which kills a program that never
/// asked for it.
[[nodiscard]] std::uint64_t room_under_fsize_limit(std::uint64_t size) noexcept;

/// Allocates file bytes [from, from + len) of `fd`: blocks are reserved now, so a
/// full disk fails here (an error code) rather than as SIGBUS on a later store
/// through a mapping. Never past RLIMIT_FSIZE (EFBIG instead). On a
/// file system without fallocate the size is set instead (nothing reserved).
/// 0 or an errno value.
[[nodiscard]] int allocate_file(int fd, std::uint64_t from, std::uint64_t len) noexcept;

/// Writes all `len` bytes at `offset` (pwrite, again after a short write or
/// EINTR). False on an error (errno says which).
[[nodiscard]] bool pwrite_all(int fd, char const* data, std::size_t len, std::uint64_t offset) noexcept;

/// open(2) of a file gpumem writes beside the program (the report, the stack
/// table, the OOM snapshots): never waits, never takes a controlling terminal.
/// A FIFO without a reader fails with ENXIO instead of blocking until one comes
/// (at exit: forever); the descriptor is blocking again once open, as the
/// program's own files are. -1 with errno on failure.
[[nodiscard]] int open_for_writing(char const* path, int flags, mode_t mode) noexcept;

/// write(2) that never raises SIGPIPE: a pipe or socket whose reader is gone
/// (stderr into `| head`) fails with EPIPE instead of killing a program that
/// never wrote there itself. SIGPIPE is blocked in this thread for the call, and
/// one it raised is taken back before it is unblocked. Three extra system calls:
/// for messages and rare files, never per allocation.
ssize_t write_without_sigpipe(int fd, void const* data, std::size_t len) noexcept;

/// write_without_sigpipe until all `len` bytes are written (again after a short
/// write or EINTR). 0 or an errno value (EIO for a write that wrote nothing).
[[nodiscard]] int write_all_without_sigpipe(int fd, char const* data, std::size_t len) noexcept;

/// madvise's MADV_POPULATE_WRITE (Linux 5.14), by number: the build's headers may
/// predate it, and an older kernel answers EINVAL.
inline constexpr int madv_populate_write = 23;

/// How populate_for_writing maps the pages: the best way the kernel offers, or
/// (tests) the fallback for kernels before 5.14.
enum class populate_with : std::uint8_t { best, stores };

/// Maps every page of [p, p + bytes), a MAP_SHARED mapping of a file, writable
/// and dirty now, so that later stores take no page fault in the caller's
/// thread: populated for reading only (MAP_POPULATE), a page of a shared file
/// mapping stays write-protected until its first store, whose fault (on ext4, a
/// block conversion) lands on whoever stores first. One madvise
/// (MADV_POPULATE_WRITE, Linux 5.14), else one atomic add of 0 per page. The
/// content is unchanged. The whole range must lie within the file (a page past
/// its end raises SIGBUS under the fallback); on another error the pages are
/// left to fault later.
void populate_for_writing(void* p, std::size_t bytes, populate_with how = populate_with::best) noexcept;

/// An errno value's description for messages: untranslated and thread-safe
/// (unlike strerror), "unknown error" for a value it does not know.
[[nodiscard]] const char* error_text(int err) noexcept;

}  // namespace gpumem::detail
