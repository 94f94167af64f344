#pragma once
// "<log>.stacks": the stack table beside a log (format in stack_table.hpp).
//
// Durability: each line is one write(2) on a file opened with O_APPEND. Once
// write() returns, the line is in the page cache and reaches the file even if the
// process is killed the next instant — the same promise the log's mapped rows
// keep, for a file that gets one line per distinct stack, not per event. O_APPEND
// keeps lines whole when threads, or a forked child, write at once.
//
// Opening empties the file (like a rerun's log). A line that cannot be written
// (disk full) is counted and said once; the log's rows are never held back.
//
// Thread safety: write_line from any thread.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpumem::shim {

class stack_file {
 public:
  /// Opens (creates, empties) `path` and writes the version line. On failure the
  /// object stays usable and writes nothing; error() says why.
  explicit stack_file(std::string path) noexcept;
  ~stack_file();
  stack_file(stack_file const&) = delete;
  stack_file& operator=(stack_file const&) = delete;

  /// Appends one whole line (`len` bytes ending in '\n'); false if not written.
  bool write_line(char const* line, std::size_t len) noexcept;

  [[nodiscard]] std::string const& path() const noexcept { return path_; }
  [[nodiscard]] bool usable() const noexcept { return fd_ >= 0; }
  [[nodiscard]] int error() const noexcept { return error_; }
  [[nodiscard]] std::uint64_t lost_lines() const noexcept { return lost_.load(std::memory_order_relaxed); }

 private:
  std::string path_;
  int fd_ = -1;
  int error_ = 0;
  std::atomic<std::uint64_t> lost_{0};
};

}  // namespace gpumem::shim
