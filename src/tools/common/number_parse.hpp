#pragma once
// Whole-field number parsing for the log tools' readers (the CSV log, the stack
// table): the field must be a number and nothing else.

#include <charconv>
#include <cstdint>
#include <string_view>
#include <system_error>

namespace gpumem::tools {

template <typename T>
bool parse_decimal(std::string_view s, T& out) noexcept {
  if (s.empty()) return false;
  auto const [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 10);
  return ec == std::errc{} && p == s.data() + s.size();
}

/// Hexadecimal without a "0x" prefix.
inline bool parse_hex(std::string_view s, std::uint64_t& out) noexcept {
  if (s.empty()) return false;
  auto const [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  return ec == std::errc{} && p == s.data() + s.size();
}

}  // namespace gpumem::tools
