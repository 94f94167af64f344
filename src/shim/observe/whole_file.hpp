#pragma once
// Writing a whole file in one go, for the files the shim writes once: the report
// at exit and the out-of-memory snapshots.
//
// Async-signal-safe and allocation-free (open, write and close only), so it may
// run on a failing allocation's path, from an atexit handler, or with the heap
// exhausted.

#include <cstddef>

namespace gpumem::shim {

/// Creates or empties `path` (mode 0644) and writes `size` bytes of `data` to it.
/// Returns 0, or the errno of the step that failed (EIO for a write that wrote
/// nothing). Every step is checked: a full disk may show only at close().
[[nodiscard]] int write_whole_file(char const* path, char const* data, std::size_t size) noexcept;

}  // namespace gpumem::shim
