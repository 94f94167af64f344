// The HTML report as a browser shows it: headless Chromium takes a screenshot and
// the test checks that the timeline plot is drawn (the live series' colour inside
// the plot area). Skipped when no Chromium is installed (Debian package: chromium).
#include "support/temp_file.hpp"
#include "tools/tool_test_support.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

using gpumem::test::read_file;
using gpumem::test::run_command;
using gpumem::test::temp_file;

namespace {

std::optional<std::string> find_browser() {
  char const* path = std::getenv("PATH");
  if (path == nullptr) return std::nullopt;
  std::string_view rest = path;
  while (!rest.empty()) {
    auto const colon = rest.find(':');
    std::string const dir{rest.substr(0, colon)};
    for (char const* name : {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
      std::filesystem::path const p = std::filesystem::path{dir} / name;
      std::error_code ec;
      if (std::filesystem::exists(p, ec)) return p.string();
    }
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return std::nullopt;
}

std::uint32_t be32(std::string_view s, std::size_t at) {
  auto b = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[at + i])); };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

struct image {
  std::uint32_t width{}, height{}, channels{};
  std::vector<std::uint8_t> px;
  [[nodiscard]] std::array<std::uint8_t, 3> at(std::uint32_t x, std::uint32_t y) const {
    std::size_t const i = (static_cast<std::size_t>(y) * width + x) * channels;
    return {px[i], px[i + 1], px[i + 2]};
  }
};

/// Decodes an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes).
std::optional<image> decode_png(std::string const& png) {
  if (png.size() < 8 || png.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) != 0) return std::nullopt;
  image img;
  std::string idat;
  for (std::size_t pos = 8; pos + 12 <= png.size();) {
    std::uint32_t const len = be32(png, pos);
    std::string const type = png.substr(pos + 4, 4);
    if (type == "IHDR") {
      img.width = be32(png, pos + 8);
      img.height = be32(png, pos + 12);
      auto const depth = static_cast<unsigned char>(png[pos + 16]);
      auto const colour = static_cast<unsigned char>(png[pos + 17]);
      if (depth != 8 || (colour != 2 && colour != 6) || png[pos + 20] != 0) return std::nullopt;
      img.channels = colour == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat.append(png, pos + 8, len);
    }
    pos += 12 + len;
  }
  std::size_t const stride = static_cast<std::size_t>(img.width) * img.channels;
  std::vector<std::uint8_t> raw((stride + 1) * img.height);
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<Bytef const*>(idat.data()), idat.size()) != Z_OK ||
      raw_len != raw.size()) {
    return std::nullopt;
  }
  img.px.resize(stride * img.height);
  std::size_t const bpp = img.channels;
  for (std::size_t y = 0; y < img.height; ++y) {
    std::uint8_t const filter = raw[y * (stride + 1)];
    std::uint8_t const* in = &raw[y * (stride + 1) + 1];
    std::uint8_t* out = &img.px[y * stride];
    std::uint8_t const* up = y > 0 ? &img.px[(y - 1) * stride] : nullptr;
    for (std::size_t i = 0; i < stride; ++i) {
      int const a = i >= bpp ? out[i - bpp] : 0;
      int const b = up ? up[i] : 0;
      int const c = (up && i >= bpp) ? up[i - bpp] : 0;
      int pred = 0;
      switch (filter) {
        case 0: pred = 0; break;
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: {
          int const p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
          break;
        }
        default: return std::nullopt;
      }
      out[i] = static_cast<std::uint8_t>(in[i] + pred);
    }
  }
  return img;
}

}  // namespace

TEST(HtmlScreenshot, BrowserShowsTheTimelinePlot) {
  auto const browser = find_browser();
  if (!browser) GTEST_SKIP() << "no chromium on PATH (Debian/Ubuntu package: chromium)";
  temp_file tmp{"report.html"};
  std::string const shot = tmp.dir() + "/shot.png";
  auto const made = run_command(
      std::string{GPUMEM_REPORT_BIN} + " " + GPUMEM_SOURCE_DIR + "/examples/logs/training.csv --html " + tmp.path(),
      tmp.path());
  ASSERT_EQ(made.status, 0) << made.err;
  // --no-sandbox: test machines run as root in containers, where the sandbox cannot start.
  auto const r = run_command("timeout 120 " + *browser +
                                 " --headless --no-sandbox --disable-gpu --hide-scrollbars --screenshot=" + shot +
                                 " --window-size=1100,900 file://" + tmp.path(),
                             tmp.path() + ".browser");
  ASSERT_TRUE(std::filesystem::exists(shot)) << "browser exit " << r.status << ": " << r.err;
  auto const img = decode_png(read_file(shot));
  ASSERT_TRUE(img) << "screenshot is not an 8-bit RGB(A) PNG";
  ASSERT_EQ(img->width, 1100u);
  ASSERT_EQ(img->height, 900u);
  // The page starts with the timeline: an SVG of 960x420 below the two headings,
  // i.e. within x 20..1000, y 120..580 of the window. Its live series is rgb(31,119,180).
  std::size_t blue = 0, ink = 0;
  for (std::uint32_t y = 120; y < 580; ++y) {
    for (std::uint32_t x = 20; x < 1000; ++x) {
      auto const p = img->at(x, y);
      if (p[0] == 31 && p[1] == 119 && p[2] == 180) ++blue;
      if (p[0] < 200 || p[1] < 200 || p[2] < 200) ++ink;
    }
  }
  RecordProperty("blue_pixels", static_cast<int>(blue));
  RecordProperty("ink_pixels", static_cast<int>(ink));
  EXPECT_GT(blue, 1000u) << "the live-bytes line is missing from the plot";
  EXPECT_GT(ink, 3000u) << "axes and labels are missing";
  // Above the plot (the page heading area, left of the text) stays white.
  EXPECT_EQ(img->at(5, 5), (std::array<std::uint8_t, 3>{255, 255, 255}));
}
