#include "timeline_plot.hpp"

#include "log_messages.hpp"

#include <algorithm>
#include <array>
#include <limits>

namespace gpumem::tools {

namespace {

constexpr std::array<rgb, 6> palette{
    {{31, 119, 180}, {214, 39, 40}, {44, 160, 44}, {148, 103, 189}, {255, 127, 14}, {23, 190, 207}}};

rgb lighter(rgb c) {
  auto mix = [](std::uint8_t v) { return static_cast<std::uint8_t>(v + (255 - v) / 2); };
  return {mix(c.r), mix(c.g), mix(c.b)};
}

constexpr rgb ink{40, 40, 40};

}  // namespace

std::vector<plot_series> timeline_series(std::vector<log_summary const*> const& logs, combined_summary const* combined,
                                         int plot_width) {
  std::size_t const max_points = static_cast<std::size_t>(std::max(plot_width, 16)) * 4;
  std::vector<plot_series> out;
  bool const several = logs.size() > 1;
  for (std::size_t i = 0; i < logs.size(); ++i) {
    auto const& s = *logs[i];
    rgb const color = palette[i % palette.size()];
    std::string const name = several ? std::string{base_name(s.path)} + " " : std::string{};
    if (s.peak_reserved_bytes) {
      out.push_back({name + "reserved", lighter(color), downsample(s.timeline, max_points), true});
    }
    out.push_back({name + "live", color, downsample(s.timeline, max_points), false});
  }
  if (combined != nullptr) {
    if (combined->peak_reserved_bytes) {
      out.push_back({"all logs reserved", lighter(ink), downsample(combined->timeline, max_points), true});
    }
    out.push_back({"all logs live", ink, downsample(combined->timeline, max_points), false});
  }
  return out;
}

plot_layout::plot_layout(std::vector<plot_series> const& series, int w, int h) : width{w}, height{h} {
  t0 = std::numeric_limits<std::int64_t>::max();
  t1 = std::numeric_limits<std::int64_t>::min();
  for (auto const& s : series) {
    for (auto const& p : s.points) {
      t0 = std::min(t0, p.time_ns);
      t1 = std::max(t1, p.time_ns);
      std::uint64_t const v = s.reserved ? static_cast<std::uint64_t>(std::max<std::int64_t>(p.reserved, 0)) : p.live;
      vmax = std::max(vmax, v);
    }
  }
  if (t0 > t1) t0 = t1 = 0;
  last_event = t1;
  if (t1 == t0) t1 = t0 + 1;
  tu = time_unit_for(t1 - t0);
  bu = byte_unit_for(vmax);
  xticks = nice_ticks(static_cast<double>(t1 - t0), tu.scale, 8);
  yticks = nice_ticks(static_cast<double>(std::max<std::uint64_t>(vmax, 1)), bu.scale, 6);
  // Axes end on the last tick, so the top line and right edge carry a label.
  vmax = static_cast<std::uint64_t>(yticks.values.back());
  t1 = t0 + static_cast<std::int64_t>(xticks.values.back());
}

double plot_layout::x(std::int64_t t) const noexcept {
  double const f = static_cast<double>(t - t0) / static_cast<double>(std::max<std::int64_t>(t1 - t0, 1));
  return plot_left() + f * (plot_right() - plot_left());
}

double plot_layout::y(double bytes) const noexcept {
  double const f = bytes / static_cast<double>(std::max<std::uint64_t>(vmax, 1));
  return plot_bottom() - f * (plot_bottom() - plot_top());
}

std::string plot_layout::x_label() const { return std::string{"time since first event ("} + tu.name + ")"; }
std::string plot_layout::y_label() const { return std::string{"bytes ("} + bu.name + ")"; }
std::string plot_layout::x_tick_label(double v) const { return tick_label(v / tu.scale); }
std::string plot_layout::y_tick_label(double v) const { return tick_label(v / bu.scale); }

std::vector<std::pair<double, double>> plot_layout::path(plot_series const& s) const {
  std::vector<std::pair<double, double>> pts;
  pts.reserve(s.points.size() * 2 + 1);
  double prev_y = y(0);
  pts.emplace_back(s.points.empty() ? x(t0) : x(s.points.front().time_ns), prev_y);
  for (auto const& p : s.points) {
    double const px = x(p.time_ns);
    double const v = s.reserved ? static_cast<double>(std::max<std::int64_t>(p.reserved, 0))
                                : static_cast<double>(p.live);
    pts.emplace_back(px, prev_y);  // hold the previous value until this event
    prev_y = y(v);
    pts.emplace_back(px, prev_y);
  }
  if (!s.points.empty() && s.points.back().time_ns < last_event) pts.emplace_back(x(last_event), prev_y);
  return pts;
}

}  // namespace gpumem::tools
