#pragma once
// The one exception type of the configuration layer.

#include <stdexcept>
#include <string>

namespace gpumem::config {

/// What the shim does when the configuration cannot be used.
enum class on_error {
  fail,        ///< print the message, exit(1) at the first allocation: never run with a different config
  passthrough  ///< print the message, then pass every call to CUDA untouched
};

/// A configuration or environment value that cannot be used. what() is the complete,
/// user-facing message: "gpumem: config error: <where>: <key>: <problem> (<hint>)" —
/// except from parse_size(), whose message is the bare problem (its caller adds where).
struct config_error : std::runtime_error {
  using std::runtime_error::runtime_error;
  config_error(std::string const& message, on_error requested_policy)
      : std::runtime_error{message}, policy{requested_policy} {}

  /// The on_error policy the user asked for, as far as it could be read before the
  /// error: GPUMEM_ON_ERROR if valid, else the file's [gpumem] on_error if that table
  /// was read, else fail. The shim applies it.
  on_error policy = on_error::fail;
};

}  // namespace gpumem::config
