// Size parsing and formatting (see include/gpumem/config/size_parse.hpp).

#include <gpumem/config/size_parse.hpp>

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cmath>
#include <limits>

namespace gpumem::config {
namespace {

struct unit {
  std::string_view name;  // lower case
  std::uint64_t multiplier;
};

// Exact products of 64-bit values (GCC/Clang extension; -Wpedantic needs the marker).
__extension__ using u128 = unsigned __int128;

constexpr std::uint64_t kibi = 1024;
constexpr std::array units{
    unit{"", 1},
    unit{"b", 1},
    unit{"k", kibi},
    unit{"kib", kibi},
    unit{"kb", 1000},
    unit{"m", kibi* kibi},
    unit{"mib", kibi* kibi},
    unit{"mb", 1000ULL * 1000},
    unit{"g", kibi* kibi* kibi},
    unit{"gib", kibi* kibi* kibi},
    unit{"gb", 1000ULL * 1000 * 1000},
    unit{"t", kibi* kibi* kibi* kibi},
    unit{"tib", kibi* kibi* kibi* kibi},
    unit{"tb", 1000ULL * 1000 * 1000 * 1000},
};

[[noreturn]] void fail(std::string_view text, std::string_view problem) {
  throw config_error{fmt::format("\"{}\": {}", text, problem)};
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) { s.remove_prefix(1); }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) { s.remove_suffix(1); }
  return s;
}

}  // namespace

size_value parse_size(std::string_view const text) {
  std::string_view s = trim(text);
  if (s.empty()) { fail(text, "empty size"); }
  if (s.front() == '-') { fail(text, "negative size"); }
  if (s.front() == '+') { s.remove_prefix(1); }

  // Integer and fraction digits, kept exact: doubles would turn "1.1GiB" into a value
  // that differs between platforms.
  constexpr std::uint64_t max_u64 = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t whole = 0;
  std::size_t i = 0;
  std::size_t int_digits = 0;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) != 0; ++i, ++int_digits) {
    auto const d = static_cast<std::uint64_t>(s[i] - '0');
    if (whole > (max_u64 - d) / 10) { fail(text, "too large (more than 2^64 - 1 bytes)"); }
    whole = whole * 10 + d;
  }
  std::uint64_t frac = 0;
  std::uint64_t frac_scale = 1;
  std::size_t frac_digits = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) != 0; ++i, ++frac_digits) {
      if (frac_digits < 18) {  // beyond 1e-18 nothing changes the byte count
        frac = frac * 10 + static_cast<std::uint64_t>(s[i] - '0');
        frac_scale *= 10;
      }
    }
  }
  if (int_digits == 0 && frac_digits == 0) { fail(text, "not a number"); }

  std::string_view const suffix = trim(s.substr(i));
  if (suffix == "%") {
    double const pct = static_cast<double>(whole) + static_cast<double>(frac) / static_cast<double>(frac_scale);
    if (pct > 100.0) { fail(text, "percentage above 100%"); }
    return size_value::of_percent(pct);
  }

  std::string lower;
  for (char const c : suffix) { lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c)))); }
  for (unit const& u : units) {
    if (u.name != lower) { continue; }
    if (frac != 0 && u.multiplier == 1) { fail(text, "fractional number of bytes"); }
    if (whole > max_u64 / u.multiplier) { fail(text, "too large (more than 2^64 - 1 bytes)"); }
    auto const frac_bytes = static_cast<std::uint64_t>(static_cast<u128>(frac) * u.multiplier / frac_scale);
    std::uint64_t const bytes = whole * u.multiplier;
    if (bytes > max_u64 - frac_bytes) { fail(text, "too large (more than 2^64 - 1 bytes)"); }
    return size_value::of_bytes(bytes + frac_bytes);
  }
  fail(text, fmt::format("unknown unit \"{}\"", suffix));
}

std::size_t size_value::resolve(std::size_t const free_bytes) const noexcept {
  if (!is_percent) { return static_cast<std::size_t>(bytes); }
  auto const exact = std::floor(static_cast<long double>(free_bytes) * static_cast<long double>(percent) / 100.0L);
  auto const b = static_cast<std::size_t>(exact);
  return b & ~std::size_t{255};
}

std::string size_value::to_string() const {
  if (is_percent) { return fmt::format("{:g}%", percent); }
  return format_bytes(bytes);
}

std::string format_bytes(std::uint64_t const bytes) {
  static constexpr std::array<std::string_view, 5> names{"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t idx = 0;
  std::uint64_t scale = 1;
  while (idx + 1 < names.size() && bytes >= scale * 1024) {
    scale *= 1024;
    ++idx;
  }
  if (idx == 0) { return fmt::format("{} B", bytes); }
  // Two decimals, trailing zeros dropped: 1.5 GiB, 1.25 MiB, 8 GiB.
  auto const hundredths = static_cast<std::uint64_t>((static_cast<u128>(bytes) * 100 + scale / 2) / scale);
  std::string out = fmt::format("{}.{:02}", hundredths / 100, hundredths % 100);
  while (out.back() == '0') { out.pop_back(); }
  if (out.back() == '.') { out.pop_back(); }
  return fmt::format("{} {}", out, names[idx]);
}

}  // namespace gpumem::config
