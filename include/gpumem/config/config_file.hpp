#pragma once
// read_config_file: the text of a configuration file, read the same way wherever
// one is named (GPUMEM_CONFIG in the shim, gpumem-replay --config). A regular file
// is read whole. A pipe, FIFO or character device is read only while it delivers,
// for at most 2 s in all and 1 MiB (a named pipe nobody writes to would otherwise
// hang the program forever, in open() or in read()). A directory or a block device
// is refused. POSIX calls rather than a stream: a stream "opens" a directory and
// then reads nothing, which would silently mean an empty file.

#include <optional>
#include <string>

namespace gpumem::config {

/// The text of `path`, or nullopt with `why` saying why it cannot be read, in words
/// that follow "cannot read <path>: ". Throws std::bad_alloc only.
[[nodiscard]] std::optional<std::string> read_config_file(std::string const& path, std::string& why);

}  // namespace gpumem::config
