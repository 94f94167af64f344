#pragma once
// What a path names when it is not a regular file, for the messages that refuse
// it (the allocation log, the configuration file).

#include <sys/stat.h>

#include <string>

namespace gpumem::detail {

/// "a directory", "a character device", "a block device", "a FIFO (pipe)", "a
/// socket", or "a file of an unknown kind" (never called for a regular file).
[[nodiscard]] inline char const* file_kind(mode_t m) noexcept {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO (pipe)";
  if (S_ISSOCK(m)) return "a socket";
  return "a file of an unknown kind";
}

/// Why a file of mode `m`, not a regular file, cannot be the log: "it is a
/// directory", else "it is <file_kind>, not a regular file".
[[nodiscard]] inline std::string not_a_regular_file(mode_t m) {
  if (S_ISDIR(m)) return "it is a directory";
  return std::string{"it is "} + file_kind(m) + ", not a regular file";
}

}  // namespace gpumem::detail
