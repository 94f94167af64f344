#include "text_escape.hpp"

#include <cstddef>
#include <cstdint>

namespace gpumem::tools {

namespace {

/// Length of the well-formed UTF-8 sequence of two bytes or more at s[i], or 0
/// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
std::size_t utf8_multibyte(std::string_view s, std::size_t i) noexcept {
  auto const b = [&](std::size_t k) { return static_cast<std::uint8_t>(s[i + k]); };
  auto const cont = [&](std::size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  std::uint8_t const c = b(0);
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;
    if (c == 0xED && b(1) >= 0xA0) return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;
    if (c == 0xF4 && b(1) >= 0x90) return 0;
    return 4;
  }
  return 0;
}

constexpr char hex_digits[] = "0123456789abcdef";

void byte_escape(std::string& out, std::uint8_t c, std::string_view prefix) {
  out += prefix;
  out += hex_digits[c >> 4];
  out += hex_digits[c & 15];
}

/// Walks `s`, handing plain ASCII to `ascii`, well-formed multibyte sequences
/// through unchanged, and control characters and invalid bytes to `other`.
template <typename Ascii, typename Other>
std::string walk(std::string_view s, Ascii&& ascii, Other&& other) {
  std::string out;
  out.reserve(s.size() + 2);
  for (std::size_t i = 0; i < s.size();) {
    auto const c = static_cast<std::uint8_t>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      ascii(out, static_cast<char>(c));
      ++i;
    } else if (std::size_t const n = c >= 0x80 ? utf8_multibyte(s, i) : 0; n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      other(out, c);
      ++i;
    }
  }
  return out;
}

}  // namespace

std::string escape_text(std::string_view s) {
  return walk(
      s, [](std::string& out, char c) { out += c; },
      [](std::string& out, std::uint8_t c) { byte_escape(out, c, "\\x"); });
}

std::string escape_html(std::string_view s) {
  return walk(
      s,
      [](std::string& out, char c) {
        switch (c) {
          case '&': out += "&amp;"; break;
          case '<': out += "&lt;"; break;
          case '>': out += "&gt;"; break;
          case '"': out += "&quot;"; break;
          case '\'': out += "&#39;"; break;
          default: out += c;
        }
      },
      [](std::string& out, std::uint8_t c) { byte_escape(out, c, "\\x"); });
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  out += walk(
      s,
      [](std::string& o, char c) {
        if (c == '"' || c == '\\') o += '\\';
        o += c;
      },
      [](std::string& o, std::uint8_t c) {
        switch (c) {
          case '\n': o += "\\n"; break;
          case '\t': o += "\\t"; break;
          case '\r': o += "\\r"; break;
          default: byte_escape(o, c, "\\u00");
        }
      });
  out += '"';
  return out;
}

}  // namespace gpumem::tools
