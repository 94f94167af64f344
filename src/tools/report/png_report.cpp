#include "report.hpp"

#include "raster.hpp"
#include "timeline_plot.hpp"

namespace gpumem::tools {

std::string png_report(report_data const& r, int width, int height) {
  std::vector<log_summary const*> logs;
  for (auto const& s : r.logs) logs.push_back(&s);
  plot_layout probe{{}, width, height};  // margins only, to size the series
  auto const series = timeline_series(logs, r.combined ? &*r.combined : nullptr,
                                      probe.plot_right() - probe.plot_left());
  plot_layout const layout{series, width, height};
  canvas c{width, height};
  draw_timeline(c, layout, series, "gpumem: device memory over time");
  return c.to_png();
}

}  // namespace gpumem::tools
