#pragma once
// A small strict JSON parser (RFC 8259) for the tools (they read out-of-memory
// snapshots) and their tests: it rejects what a browser or Perfetto would reject
// (raw control characters in strings, trailing commas, bad escapes, trailing
// garbage) and keeps each number's text, so 64-bit values can be compared exactly.
// Errors are std::runtime_error naming the byte offset.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumem::tools {

struct json_member;

struct json_value {
  enum class kind { null, boolean, number, string, array, object };
  kind k = kind::null;
  bool boolean = false;
  double number = 0;
  std::string text;  ///< a string's value, or a number as written
  std::vector<json_value> items;
  std::vector<json_member> members;  ///< an object's, in document order

  [[nodiscard]] bool is(kind want) const noexcept { return k == want; }
  [[nodiscard]] bool has(std::string_view key) const;
  [[nodiscard]] json_value const& operator[](std::string_view key) const;
  [[nodiscard]] json_value const& operator[](std::size_t i) const { return items.at(i); }
};

// A struct rather than std::pair: std::vector may hold a type that is still
// incomplete, std::pair may not (Clang rejects std::pair<std::string, json_value>
// inside json_value).
struct json_member {
  std::string name;
  json_value value;
};

inline bool json_value::has(std::string_view key) const {
  for (auto const& [name, v] : members) {
    if (name == key) return true;
  }
  return false;
}

inline json_value const& json_value::operator[](std::string_view key) const {
  for (auto const& [name, v] : members) {
    if (name == key) return v;
  }
  throw std::out_of_range{"no member '" + std::string{key} + "'"};
}

class json_parser {
 public:
  static json_value parse(std::string_view text) {
    json_parser p{text};
    p.space();
    json_value v = p.value(0);
    p.space();
    if (p.pos_ != text.size()) p.fail("trailing characters");
    return v;
  }

 private:
  explicit json_parser(std::string_view t) : t_{t} {}

  [[noreturn]] void fail(std::string const& what) const {
    throw std::runtime_error{"JSON error at byte " + std::to_string(pos_) + ": " + what};
  }
  char peek() const { return pos_ < t_.size() ? t_[pos_] : '\0'; }
  void expect(char c) {
    if (peek() != c || pos_ >= t_.size()) fail(std::string{"expected '"} + c + "'");
    ++pos_;
  }
  void space() {
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\n' || t_[pos_] == '\r' || t_[pos_] == '\t')) ++pos_;
  }
  void word(std::string_view w) {
    if (t_.substr(pos_, w.size()) != w) fail("bad literal");
    pos_ += w.size();
  }

  /// The comma-separated elements of an object or array, each read by element(),
  /// from the opening bracket (at pos_) to `close`.
  template <typename Element>
  void elements(char close, Element&& element) {
    ++pos_;
    space();
    if (peek() == close) {
      ++pos_;
      return;
    }
    for (;;) {
      space();
      element();
      space();
      if (peek() != ',') break;
      ++pos_;
    }
    expect(close);
  }

  json_value value(int depth) {
    if (depth > 256) fail("nested too deep");
    json_value v;
    switch (peek()) {
      case '{':
        v.k = json_value::kind::object;
        elements('}', [&] {
          std::string key = string();
          space();
          expect(':');
          space();
          v.members.push_back({std::move(key), value(depth + 1)});
        });
        return v;
      case '[':
        v.k = json_value::kind::array;
        elements(']', [&] { v.items.push_back(value(depth + 1)); });
        return v;
      case '"':
        v.k = json_value::kind::string;
        v.text = string();
        return v;
      case 't':
        word("true");
        v.k = json_value::kind::boolean;
        v.boolean = true;
        return v;
      case 'f':
        word("false");
        v.k = json_value::kind::boolean;
        return v;
      case 'n': word("null"); return v;
      default: return number();
    }
  }

  json_value number() {
    std::size_t const start = pos_;
    auto digits = [&] {
      std::size_t const from = pos_;
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
      if (pos_ == from) fail("expected a digit");
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else {
      digits();
    }
    if (peek() == '.') {
      ++pos_;
      digits();
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      digits();
    }
    json_value v;
    v.k = json_value::kind::number;
    v.text = std::string{t_.substr(start, pos_ - start)};
    v.number = std::stod(v.text);
    return v;
  }

  unsigned hex4() {
    if (pos_ + 4 > t_.size()) fail("short \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char const c = t_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("bad \\u escape");
    }
    return v;
  }

  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= t_.size()) fail("unterminated string");
      auto const c = static_cast<unsigned char>(t_[pos_++]);
      if (c == '"') return out;
      if (c < 0x20) fail("raw control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (pos_ >= t_.size()) fail("unterminated escape");
      switch (t_[pos_++]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            word("\\u");
            unsigned const low = hex4();
            if (low < 0xDC00 || low >= 0xE000) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          utf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
  }

  std::string_view t_;
  std::size_t pos_ = 0;
};

inline json_value parse_json(std::string_view text) { return json_parser::parse(text); }

}  // namespace gpumem::tools
