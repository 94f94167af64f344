#include "units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

namespace gpumem::tools {

namespace {

std::string three_digits(double v, char const* unit) {
  if (v < 9.995) return fmt::format("{:.2f} {}", v, unit);
  if (v < 99.95) return fmt::format("{:.1f} {}", v, unit);
  return fmt::format("{:.0f} {}", v, unit);
}

}  // namespace

std::string human_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static constexpr std::array<char const*, 6> units{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  std::size_t u = 0;
  // Move up before rounding would print "1024 KiB".
  while (v >= 999.5 && u + 1 < units.size()) {
    v /= 1024.0;
    ++u;
  }
  return three_digits(v, units[u]);
}

std::string size_range_label(std::uint64_t lo, std::uint64_t hi, std::string_view dash) {
  if (hi == 0) return "0 B";
  std::string const upper = hi == ~std::uint64_t{0} ? std::string{"16.0 EiB"} : human_bytes(hi + 1);
  return fmt::format("{}{}<{}", human_bytes(lo), dash, upper);
}

std::string human_duration(std::int64_t ns) {
  if (ns < 0) return "-" + human_duration(-ns);
  auto const v = static_cast<double>(ns);
  if (ns < 1000) return fmt::format("{} ns", ns);
  if (v < 999.5e3) return three_digits(v / 1e3, "us");
  if (v < 999.5e6) return three_digits(v / 1e6, "ms");
  if (v < 120e9) return three_digits(v / 1e9, "s");
  if (v < 7200e9) return three_digits(v / 60e9, "min");
  return three_digits(v / 3600e9, "h");
}

std::string logged_duration(std::uint64_t ns) {
  return human_duration(static_cast<std::int64_t>(std::min<std::uint64_t>(ns, INT64_MAX)));
}

std::string hex(std::uint64_t v) { return v == 0 ? "0" : fmt::format("{:#x}", v); }

axis_ticks nice_ticks(double max, double unit, int max_ticks) {
  axis_ticks t;
  if (!(max > 0) || max_ticks < 1) {
    t.step = unit;
    t.values = {0.0, unit};
    return t;
  }
  double const raw = max / unit / max_ticks;
  double const mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw * (1 - 1e-9)) {
      step = m * mag;
      break;
    }
  }
  t.step = step * unit;
  for (int i = 0;; ++i) {
    double const v = i * t.step;
    t.values.push_back(v);
    if (v >= max * (1 - 1e-12)) break;
  }
  return t;
}

byte_unit byte_unit_for(std::uint64_t max_bytes) {
  static constexpr std::array<byte_unit, 5> units{
      {{1.0, "B"}, {1024.0, "KiB"}, {1048576.0, "MiB"}, {1073741824.0, "GiB"}, {1099511627776.0, "TiB"}}};
  std::size_t u = 0;
  while (u + 1 < units.size() && static_cast<double>(max_bytes) >= units[u + 1].scale) ++u;
  return units[u];
}

time_unit time_unit_for(std::int64_t span_ns) {
  auto const s = static_cast<double>(span_ns);
  if (s < 1e3) return {1.0, "ns"};
  if (s < 1e6) return {1e3, "us"};
  if (s < 1e9) return {1e6, "ms"};
  if (s < 120e9) return {1e9, "s"};
  if (s < 7200e9) return {60e9, "min"};
  return {3600e9, "h"};
}

std::string tick_label(double value_in_unit) {
  std::string s = fmt::format("{:.3f}", value_in_unit);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

}  // namespace gpumem::tools
