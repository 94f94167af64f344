#pragma once
// Human-readable numbers shared by the text and HTML renderings (pure functions).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::tools {

/// "0 B", "512 B", "1.50 KiB", "12.3 MiB", "768 MiB": three significant digits, binary units.
[[nodiscard]] std::string human_bytes(std::uint64_t bytes);

/// A histogram bucket's sizes: "1.00 KiB - <2.00 KiB" (lo to hi inclusive, so the
/// label names hi + 1 exclusive; the top bucket ends "<16.0 EiB", 2^64); "0 B" for 0.
[[nodiscard]] std::string size_range_label(std::uint64_t lo, std::uint64_t hi, std::string_view dash = " - ");

/// A duration in the largest unit that keeps it >= 1: "250 ns", "1.50 ms", "12.0 s".
[[nodiscard]] std::string human_duration(std::int64_t ns);
/// A logged duration (DurationNs), saturated at the largest int64_t.
[[nodiscard]] std::string logged_duration(std::uint64_t ns);

/// 0x-prefixed lowercase hex ("0x1"); 0 prints as "0", like the log's null stream.
[[nodiscard]] std::string hex(std::uint64_t v);

/// Ticks for an axis from 0 to `max`: a "nice" step (1, 2 or 5 times a power of ten
/// of `unit`), at most `max_ticks` + 1 values, the last >= max.
struct axis_ticks {
  double step{};
  std::vector<double> values;
};
[[nodiscard]] axis_ticks nice_ticks(double max, double unit, int max_ticks);

/// The binary unit that suits a maximum: {1024^k, "KiB"...}.
struct byte_unit {
  double scale;
  char const* name;
};
[[nodiscard]] byte_unit byte_unit_for(std::uint64_t max_bytes);

/// The time unit that suits a span in ns: {1e9, "s"}...
struct time_unit {
  double scale;
  char const* name;
};
[[nodiscard]] time_unit time_unit_for(std::int64_t span_ns);

/// A tick value without trailing zeros: 0.5, 2, 1.25.
[[nodiscard]] std::string tick_label(double value_in_unit);

}  // namespace gpumem::tools
