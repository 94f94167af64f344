// The timeline plot's geometry (what the HTML report draws as SVG), the human-readable
// units and the HTML report's escaping.
#include "timeline_plot.hpp"
#include "report.hpp"
#include "units.hpp"

#include "log_merge.hpp"
#include "log_reader.hpp"
#include "text_escape.hpp"

#include "tools/tool_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

using namespace gpumem::tools;

namespace {

report_data one_log(std::string const& text, std::string const& name) {
  report_data r;
  r.logs.push_back(analyze(text, name));
  return r;
}

/// The plot of one log as the HTML report lays it out.
struct one_plot {
  std::vector<plot_series> series;
  plot_layout layout;
};

one_plot plot_of(report_data const& r, int width, int height) {
  std::vector<log_summary const*> logs;
  for (auto const& s : r.logs) logs.push_back(&s);
  plot_layout const probe{{}, width, height};
  auto series = timeline_series(logs, nullptr, probe.plot_right() - probe.plot_left());
  plot_layout layout{series, width, height};
  return {std::move(series), std::move(layout)};
}

}  // namespace

TEST(Units, HumanNumbers) {
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(1023), "1023 B");
  EXPECT_EQ(human_bytes(1024), "1.00 KiB");
  EXPECT_EQ(human_bytes(1536 * 1024), "1.50 MiB");
  EXPECT_EQ(human_bytes(100 * 1048576ull), "100 MiB");
  EXPECT_EQ(human_bytes(1023 * 1048576ull), "1.00 GiB");  // not "1023 MiB": three digits at most
  EXPECT_EQ(human_bytes(1ull << 40), "1.00 TiB");
  EXPECT_EQ(human_bytes(~0ull), "16.0 EiB");
  EXPECT_EQ(size_range_label(0, 0), "0 B");
  EXPECT_EQ(size_range_label(1024, 2047), "1.00 KiB - <2.00 KiB");
  // The top bucket ends at 2^64 - 1: its label must not wrap to "<0 B".
  EXPECT_EQ(size_range_label(1ull << 63, ~0ull), "8.00 EiB - <16.0 EiB");
  EXPECT_EQ(human_duration(999), "999 ns");
  EXPECT_EQ(human_duration(1500), "1.50 us");
  EXPECT_EQ(human_duration(2'500'000'000), "2.50 s");
  EXPECT_EQ(hex(0), "0");
  EXPECT_EQ(hex(0x5603a0c0), "0x5603a0c0");
  auto const t = nice_ticks(1.5 * 1073741824.0, 1073741824.0, 6);
  EXPECT_DOUBLE_EQ(t.step, 0.5 * 1073741824.0);
  EXPECT_EQ(t.values.size(), 4u);  // 0, 0.5, 1, 1.5 GiB
  EXPECT_EQ(tick_label(0.5), "0.5");
  EXPECT_EQ(tick_label(2.0), "2");
}

TEST(TimelinePlot, TheLiveLineStaysInsideThePlotAreaAndItsPeakRunsAlongTheTop) {
  gpumem::test::gpumem_log l;
  l.alloc(0x100, 1 << 20, 0).alloc(0x200, 3 << 20, 1'000'000'000).free(0x100, 1 << 20, 2'000'000'000);
  auto const p = plot_of(one_log(l.text(), "p.csv"), 400, 300);
  ASSERT_EQ(p.series.size(), 1U);
  EXPECT_EQ(p.series[0].color, (rgb{31, 119, 180}));
  auto const& lay = p.layout;
  // Plot area: x 90..380, y 40..250 (default margins). Axes end on ticks 2 s and 4 MiB.
  EXPECT_EQ(lay.plot_left(), 90);
  EXPECT_EQ(lay.plot_right(), 380);
  EXPECT_EQ(lay.plot_top(), 40);
  EXPECT_EQ(lay.plot_bottom(), 250);
  EXPECT_EQ(lay.vmax, 4U << 20);
  EXPECT_EQ(lay.t1 - lay.t0, 2'000'000'000);
  EXPECT_EQ(lay.y_label(), "bytes (MiB)");
  auto const pts = lay.path(p.series[0]);
  ASSERT_FALSE(pts.empty());
  for (auto const& [x, y] : pts) {
    EXPECT_GE(x, lay.plot_left());
    EXPECT_LE(x, lay.plot_right());
    EXPECT_GE(y, lay.plot_top());
    EXPECT_LE(y, lay.plot_bottom());
  }
  // The peak (4 MiB from t = 1 s, x = 235 up to the last event at x = 380) runs
  // along the top of the plot; a step line: each event a vertical then a level run.
  double const top = lay.plot_top();
  auto const at_top = std::count_if(pts.begin(), pts.end(), [&](auto const& q) { return q.second == top; });
  EXPECT_GE(at_top, 2);
  EXPECT_DOUBLE_EQ(lay.x(1'000'000'000), 235.0);
  EXPECT_DOUBLE_EQ(lay.y(1 << 20), 250.0 - 210.0 / 4);
  EXPECT_EQ(pts.front(), (std::pair<double, double>{90.0, 250.0}));
}

TEST(TimelinePlot, ReservedIsASeriesOfItsOwnWhenTheLogHasIt) {
  // Live 1 MiB then 3 MiB; reserved 8 MiB throughout: the reserved line (lighter
  // blue) runs along the top of the plot (axis 0..8 MiB), the live line below it.
  std::string const text =
      "Action,Pointer,Size,TimeNs,Reserved\n"
      "allocate,0x100,1048576,0,8388608\n"
      "allocate,0x200,2097152,1000000000,8388608\n"
      "free,0x100,1048576,2000000000,8388608\n";
  auto const p = plot_of(one_log(text, "r.csv"), 400, 300);
  ASSERT_EQ(p.series.size(), 2U);
  EXPECT_TRUE(p.series[0].reserved);
  EXPECT_EQ(p.series[0].color, (rgb{143, 187, 217}));
  EXPECT_FALSE(p.series[1].reserved);
  EXPECT_EQ(p.layout.vmax, 8U << 20);
  auto const reserved = p.layout.path(p.series[0]);
  ASSERT_GE(reserved.size(), 2U);
  // From the first event's rise on (the path starts at 0 bytes).
  for (std::size_t i = 2; i < reserved.size(); ++i) EXPECT_EQ(reserved[i].second, p.layout.plot_top());
  for (auto const& [x, y] : p.layout.path(p.series[1])) EXPECT_GT(y, p.layout.plot_top());
  // The same log without its Reserved column: no reserved series.
  auto const plain = plot_of(
      one_log("Action,Pointer,Size,TimeNs\nallocate,0x100,1048576,0\nallocate,0x200,2097152,1000000000\n", "p.csv"),
      400, 300);
  ASSERT_EQ(plain.series.size(), 1U);
  EXPECT_FALSE(plain.series[0].reserved);
}

TEST(TimelineSeries, ReservedAndCombinedSeriesWhenThereAreSeveralLogs) {
  std::string const with_reserved = "Action,Pointer,Size,TimeNs,Reserved\nallocate,0x100,10,1,4096\n";
  std::string const plain = "Action,Pointer,Size,TimeNs\nallocate,0x200,20,2\n";
  log_reader ra{with_reserved, "dir/a.csv"}, rb{plain, "b.csv"};
  auto const m = analyse_merged({&ra, &rb}, 10);
  auto const& sa = m.logs[0];
  auto const& sb = m.logs[1];
  auto const series = timeline_series({&sa, &sb}, &*m.combined, 300);
  ASSERT_EQ(series.size(), 5u);
  EXPECT_EQ(series[0].label, "a.csv reserved");
  EXPECT_TRUE(series[0].reserved);
  EXPECT_EQ(series[1].label, "a.csv live");
  EXPECT_EQ(series[2].label, "b.csv live");
  EXPECT_EQ(series[3].label, "all logs reserved");
  EXPECT_TRUE(series[3].reserved);
  EXPECT_EQ(series[4].label, "all logs live");
  EXPECT_EQ(series[4].points.size(), 2u);
  plot_layout const l{series, 400, 300};
  EXPECT_EQ(l.vmax, 4096u);  // reserved 4096 B: y axis 0..4 KiB in 1 KiB ticks
  EXPECT_EQ(l.yticks.values.size(), 5u);
  EXPECT_EQ(l.y_label(), "bytes (KiB)");
  EXPECT_EQ(l.x_label(), "time since first event (ns)");
  // A single log: no file names, no combined series.
  auto const one = timeline_series({&sb}, nullptr, 300);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].label, "live");
}

TEST(HtmlReport, EscapesTextFromTheLog) {
  EXPECT_EQ(escape_html("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
  std::string const page = html_report(
      one_log("Action,Pointer,Size,TimeNs,Entry\nallocate,0x100,10,1,<script>\n", "<b>.csv"));
  EXPECT_EQ(page.find("<script>"), std::string::npos);
  EXPECT_EQ(page.find("<b>.csv"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;"), std::string::npos);
  EXPECT_NE(page.find("<h2>&lt;b&gt;.csv</h2>"), std::string::npos);
}
