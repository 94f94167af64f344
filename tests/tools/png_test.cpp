// The PNG writer (checked with zlib as an independent decoder), raster primitives, font and plot.
#include "bitmap_font.hpp"
#include "png_encoder.hpp"
#include "raster.hpp"
#include "report.hpp"
#include "timeline_plot.hpp"
#include "units.hpp"

#include <gpumem/tools/log_merge.hpp>
#include <gpumem/tools/log_reader.hpp>
#include <gpumem/tools/text_escape.hpp>

#include "tools/tool_test_support.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <span>
#include <string_view>

using namespace gpumem::tools;

namespace {

std::uint32_t be32(std::string_view s, std::size_t at) {
  auto b = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[at + i])); };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

std::uint32_t crc_of(std::string_view s) {
  return static_cast<std::uint32_t>(
      ::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<Bytef const*>(s.data()), static_cast<uInt>(s.size())));
}

/// Inflates a zlib stream with zlib itself (the test's decoder is not the code under test).
std::string inflate(std::string_view z, std::size_t expected) {
  std::string out(expected + 1, '\0');  // one spare byte: a longer stream shows as a size mismatch
  uLongf size = static_cast<uLongf>(out.size());
  EXPECT_EQ(::uncompress(reinterpret_cast<Bytef*>(out.data()), &size, reinterpret_cast<Bytef const*>(z.data()),
                         static_cast<uLong>(z.size())),
            Z_OK);
  out.resize(size);
  return out;
}

struct decoded_png {
  std::uint32_t width{}, height{};
  std::size_t idat_bytes{};
  std::string pixels;  // RGB, rows top to bottom
};

/// Checks the file structure (signature, chunk CRCs, IHDR) and returns the pixels.
decoded_png decode(std::string_view png) {
  decoded_png d;
  EXPECT_EQ(png.substr(0, 8), std::string_view("\x89PNG\r\n\x1a\n", 8));
  std::size_t pos = 8;
  std::string idat;
  std::vector<std::string> types;
  while (pos + 12 <= png.size()) {
    std::uint32_t const len = be32(png, pos);
    std::string_view const type = png.substr(pos + 4, 4);
    std::string_view const data = png.substr(pos + 8, len);
    EXPECT_EQ(be32(png, pos + 8 + len), crc_of(png.substr(pos + 4, 4 + len))) << type;
    types.emplace_back(type);
    if (type == "IHDR") {
      d.width = be32(data, 0);
      d.height = be32(data, 4);
      EXPECT_EQ(data.substr(8), std::string_view("\x08\x02\x00\x00\x00", 5));
    } else if (type == "IDAT") {
      idat.append(data);
    }
    pos += 12 + len;
  }
  EXPECT_EQ(pos, png.size());
  EXPECT_EQ(types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  d.idat_bytes = idat.size();
  std::size_t const row = d.width * 3;
  std::string const raw = inflate(idat, (row + 1) * d.height);
  EXPECT_EQ(raw.size(), (row + 1) * d.height);
  for (std::uint32_t y = 0; y < d.height && raw.size() >= (row + 1) * d.height; ++y) {
    EXPECT_EQ(raw[y * (row + 1)], '\0') << "filter of row " << y;
    d.pixels.append(raw.substr(y * (row + 1) + 1, row));
  }
  return d;
}

report_data one_log(std::string const& text, std::string const& name) {
  report_data r;
  r.logs.push_back(analyze(text, name));
  return r;
}

}  // namespace

TEST(Png, EncodesAnRgbImage) {
  std::vector<std::uint8_t> px{255, 0, 0, 0, 255, 0, 0, 0, 255, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto const d = decode(encode_png_rgb(3, 2, px));
  EXPECT_EQ(d.width, 3u);
  EXPECT_EQ(d.height, 2u);
  EXPECT_EQ(d.pixels, std::string(px.begin(), px.end()));
  EXPECT_THROW((void)encode_png_rgb(3, 3, px), std::invalid_argument);
}

TEST(Png, APlotIsDeflateCompressed) {
  // 1000 x 500 RGB is 1.5 MB of pixels; a plot is mostly flat colour.
  gpumem::test::gpumem_log l;
  for (int i = 0; i < 200; ++i) l.alloc(0x1000 + i * 0x100, 1000 + i * 37, i * 1000);
  std::string const png = png_report(one_log(l.text(), "c.csv"));
  auto const d = decode(png);
  EXPECT_EQ(d.width, 1000u);
  EXPECT_EQ(d.height, 500u);
  EXPECT_LT(png.size(), 100'000u) << "not compressed?";
  EXPECT_EQ(d.pixels.size(), 1000u * 500u * 3u);
}

TEST(Raster, TextDrawsTheGlyphPixels) {
  canvas c{20, 10};
  c.text(1, 1, "1", {0, 0, 0});
  int ink = 0;
  for (int y = 0; y < 10; ++y) {
    for (int x = 0; x < 20; ++x) ink += c.at(x, y) == rgb{0, 0, 0};
  }
  EXPECT_EQ(ink, 10);                           // '1' has 10 '#' in its picture
  EXPECT_EQ(c.at(3, 1), (rgb{0, 0, 0}));        // top of the stem (column 2 of the glyph)
  EXPECT_EQ(c.at(1, 1), (rgb{255, 255, 255}));  // left of it
  EXPECT_EQ(glyph('~'), glyph('?'));            // no glyph: drawn as '?'
  EXPECT_EQ(canvas::text_width("abc"), 17);
  EXPECT_EQ(canvas::text_width("abc", 2), 34);
}

TEST(Raster, LinesAreClippedAndThick) {
  canvas c{10, 10};
  c.line(-100, 5, 100, 5, {9, 9, 9}, 3);
  for (int x = 0; x < 10; ++x) {
    EXPECT_EQ(c.at(x, 4), (rgb{9, 9, 9}));
    EXPECT_EQ(c.at(x, 6), (rgb{9, 9, 9}));
    EXPECT_EQ(c.at(x, 7), (rgb{255, 255, 255}));
  }
  c.line(1e300, 0, 0, 1e300, {1, 1, 1});  // absurd coordinates: no hang, no crash
}

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

TEST(PngReport, PlotShowsTheLiveLineInsideThePlotArea) {
  gpumem::test::gpumem_log l;
  l.alloc(0x100, 1 << 20, 0).alloc(0x200, 3 << 20, 1'000'000'000).free(0x100, 1 << 20, 2'000'000'000);
  auto const d = decode(png_report(one_log(l.text(), "p.csv"), 400, 300));
  ASSERT_EQ(d.width, 400u);
  ASSERT_EQ(d.height, 300u);
  auto at = [&](int x, int y) {
    auto const i = (static_cast<std::size_t>(y) * d.width + static_cast<std::size_t>(x)) * 3;
    return rgb{static_cast<std::uint8_t>(d.pixels[i]), static_cast<std::uint8_t>(d.pixels[i + 1]),
               static_cast<std::uint8_t>(d.pixels[i + 2])};
  };
  // Plot area: x 90..380, y 40..250 (default margins). The live series is blue.
  rgb const blue{31, 119, 180};
  int blue_pixels = 0, dark_pixels = 0;
  for (int y = 40; y <= 250; ++y) {
    for (int x = 91; x <= 380; ++x) blue_pixels += at(x, y) == blue;
  }
  for (int y = 250; y < 300; ++y) {
    for (int x = 0; x < 400; ++x) dark_pixels += at(x, y) == rgb{40, 40, 40};
  }
  EXPECT_GT(blue_pixels, 300);  // ~290 px of horizontal runs + verticals, 2 px thick
  EXPECT_GT(dark_pixels, 200);  // axis, ticks, tick labels and the axis title
  // Axes end on ticks 2 s and 4 MiB: the peak (4 MiB from t = 1 s, x = 235) runs
  // along the top grid line.
  EXPECT_EQ(at(300, 40), blue);
  EXPECT_NE(at(200, 40), blue);
}

TEST(PngReport, ReservedIsDrawnAboveLiveWhenTheLogHasIt) {
  // Live 1 MiB then 3 MiB; reserved 8 MiB throughout: the reserved line (lighter
  // blue) runs along the top of the plot (axis 0..8 MiB), the live line below it.
  std::string const text =
      "Action,Pointer,Size,TimeNs,Reserved\n"
      "allocate,0x100,1048576,0,8388608\n"
      "allocate,0x200,2097152,1000000000,8388608\n"
      "free,0x100,1048576,2000000000,8388608\n";
  auto const d = decode(png_report(one_log(text, "r.csv"), 400, 300));
  auto at = [&](int x, int y) {
    auto const i = (static_cast<std::size_t>(y) * d.width + static_cast<std::size_t>(x)) * 3;
    return rgb{static_cast<std::uint8_t>(d.pixels[i]), static_cast<std::uint8_t>(d.pixels[i + 1]),
               static_cast<std::uint8_t>(d.pixels[i + 2])};
  };
  rgb const live{31, 119, 180}, reserved{143, 187, 217};
  int live_pixels = 0, reserved_top = 0;
  for (int y = 40; y <= 250; ++y) {
    for (int x = 91; x <= 380; ++x) live_pixels += at(x, y) == live;
  }
  for (int x = 120; x <= 380; ++x) reserved_top += at(x, 40) == reserved || at(x, 41) == reserved;
  EXPECT_GT(live_pixels, 300);
  EXPECT_GT(reserved_top, 200) << "no reserved line along the 8 MiB top of the plot";
  // The same log without its Reserved column: no reserved line.
  auto const plain = decode(png_report(
      one_log("Action,Pointer,Size,TimeNs\nallocate,0x100,1048576,0\nallocate,0x200,2097152,1000000000\n", "p.csv"),
      400, 300));
  int reserved_pixels = 0;
  for (std::size_t i = 0; i + 2 < plain.pixels.size(); i += 3) {
    reserved_pixels += rgb{static_cast<std::uint8_t>(plain.pixels[i]), static_cast<std::uint8_t>(plain.pixels[i + 1]),
                           static_cast<std::uint8_t>(plain.pixels[i + 2])} == reserved;
  }
  EXPECT_EQ(reserved_pixels, 0);
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
