#pragma once
// Writing gpumem's files and messages inside other people's processes (stderr,
// the report, the stack tables, the out-of-memory snapshots, the log's header)
// without blocking the program or raising a signal in it.

#include <sys/types.h>

#include <cstddef>

namespace gpumem::detail {

/// open(2) of a file gpumem writes beside the program: never waits, never takes a
/// controlling terminal. A FIFO without a reader fails with ENXIO instead of
/// blocking until one comes (at exit: forever); the descriptor is blocking again
/// once open, as the program's own files are. -1 with errno on failure.
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

/// An errno value's description for messages: untranslated and thread-safe
/// (unlike strerror), "unknown error" for a value it does not know.
[[nodiscard]] const char* error_text(int err) noexcept;

}  // namespace gpumem::detail
