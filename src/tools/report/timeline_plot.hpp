#pragma once
// The timeline plot's geometry, for the HTML report's SVG:
// x = time since the earliest event (unit picked from the span), y = bytes (binary
// unit picked from the maximum), "nice" ticks on both axes, and each series as a
// step line (bytes stay constant between events).
// Thread safety: plain values and pure functions.

#include "log_analysis.hpp"
#include "log_merge.hpp"

#include "units.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::tools {

struct rgb {
  std::uint8_t r{}, g{}, b{};
  friend bool operator==(rgb, rgb) = default;
};

struct plot_series {
  std::string label;
  rgb color;
  std::vector<timeline_point> points;  ///< already down-sampled
  bool reserved = false;               ///< plot .reserved instead of .live
};

/// Live (and reserved, where logged) series of every log, plus the merged total
/// when there are several, each down-sampled to about 4 points per pixel column.
[[nodiscard]] std::vector<plot_series> timeline_series(std::vector<log_summary const*> const& logs,
                                                       combined_summary const* combined, int plot_width);

class plot_layout {
 public:
  plot_layout(std::vector<plot_series> const& series, int width, int height);

  int width, height;
  int left = 90, right = 20, top = 40, bottom = 50;  ///< margins around the plot area
  std::int64_t t0{}, t1{};                           ///< time axis range (ns)
  std::int64_t last_event{};                         ///< latest event of any series (ns)
  std::uint64_t vmax{};                              ///< top of the y axis (bytes)
  time_unit tu{};
  byte_unit bu{};
  axis_ticks xticks, yticks;

  [[nodiscard]] double x(std::int64_t t) const noexcept;
  [[nodiscard]] double y(double bytes) const noexcept;
  [[nodiscard]] int plot_left() const noexcept { return left; }
  [[nodiscard]] int plot_right() const noexcept { return width - right; }
  [[nodiscard]] int plot_top() const noexcept { return top; }
  [[nodiscard]] int plot_bottom() const noexcept { return height - bottom; }
  [[nodiscard]] std::string x_label() const;  ///< "time since first event (s)"
  [[nodiscard]] std::string y_label() const;  ///< "bytes (MiB)"
  [[nodiscard]] std::string x_tick_label(double v) const;
  [[nodiscard]] std::string y_tick_label(double v) const;
  /// The series as a step line in pixel coordinates, held at its last value up to
  /// the latest event of any series (a log's state persists after its last event).
  [[nodiscard]] std::vector<std::pair<double, double>> path(plot_series const& s) const;
};

}  // namespace gpumem::tools
