#pragma once
// Formatting of configuration errors, shared by the TOML parser, the environment
// overrides and the chain builder, so every message has the same shape:
//   gpumem: config error: <file>:<line>:<col>: <key>: <problem> (<hint>)

#include <gpumem/config/config_error.hpp>

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace gpumem::config::detail {

/// Whether `value` is one of `choices` ("a|b|c").
[[nodiscard]] inline bool is_choice(std::string_view value, std::string_view choices) noexcept {
  while (!choices.empty()) {
    auto const bar = choices.find('|');
    if (choices.substr(0, bar) == value) { return true; }
    choices = bar == std::string_view::npos ? std::string_view{} : choices.substr(bar + 1);
  }
  return false;
}

/// Where a value came from: a file position, or a source without one ("environment").
struct location {
  std::string_view source;
  int line = 0;  ///< 0: no position
  int column = 0;
};

[[nodiscard]] inline std::string error_message(location const& where, std::string_view key, std::string_view problem,
                                               std::string_view hint) {
  std::string out = "gpumem: config error: ";
  out += where.source;
  if (where.line > 0) { out += fmt::format(":{}:{}", where.line, where.column); }
  out += fmt::format(": {}: {}", key, problem);
  if (!hint.empty()) { out += fmt::format(" ({})", hint); }
  return out;
}

[[noreturn]] inline void raise(location const& where, std::string_view key, std::string_view problem,
                               std::string_view hint, on_error policy) {
  throw config_error{error_message(where, key, problem, hint), policy};
}

}  // namespace gpumem::config::detail
