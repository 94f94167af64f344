#include "raster.hpp"

#include "bitmap_font.hpp"
#include "png_encoder.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace gpumem::tools {

canvas::canvas(int width, int height, rgb background) : width_{width}, height_{height} {
  if (width <= 0 || height <= 0 || width > 16384 || height > 16384) {
    throw std::invalid_argument("canvas: width and height must be in 1..16384");
  }
  px_.resize(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3);
  for (std::size_t i = 0; i < px_.size(); i += 3) {
    px_[i] = background.r;
    px_[i + 1] = background.g;
    px_[i + 2] = background.b;
  }
}

rgb canvas::at(int x, int y) const noexcept {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return {};
  auto const i = (static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)) * 3;
  return {px_[i], px_[i + 1], px_[i + 2]};
}

void canvas::set(int x, int y, rgb c) noexcept {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  auto const i = (static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)) * 3;
  px_[i] = c.r;
  px_[i + 1] = c.g;
  px_[i + 2] = c.b;
}

void canvas::fill_rect(int x0, int y0, int x1, int y1, rgb c) noexcept {
  if (x0 > x1) std::swap(x0, x1);
  if (y0 > y1) std::swap(y0, y1);
  x0 = std::max(x0, 0);
  y0 = std::max(y0, 0);
  x1 = std::min(x1, width_ - 1);
  y1 = std::min(y1, height_ - 1);
  for (int y = y0; y <= y1; ++y) {
    for (int x = x0; x <= x1; ++x) set(x, y, c);
  }
}

void canvas::line(double x0, double y0, double x1, double y1, rgb c, int thickness) noexcept {
  // Clamp far-away endpoints first so a huge coordinate cannot make the loop long.
  auto const limit = static_cast<double>(std::max(width_, height_)) * 4;
  auto clamp = [&](double v) { return std::clamp(v, -limit, limit); };
  x0 = clamp(x0), y0 = clamp(y0), x1 = clamp(x1), y1 = clamp(y1);
  if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(x1) || !std::isfinite(y1)) return;
  int const lo = -(thickness - 1) / 2;
  int const hi = thickness / 2;
  double const steps = std::max({std::abs(x1 - x0), std::abs(y1 - y0), 1.0});
  auto const n = static_cast<int>(std::ceil(steps));
  for (int i = 0; i <= n; ++i) {
    double const f = i / static_cast<double>(n);
    auto const x = static_cast<int>(std::lround(x0 + (x1 - x0) * f));
    auto const y = static_cast<int>(std::lround(y0 + (y1 - y0) * f));
    for (int dy = lo; dy <= hi; ++dy) {
      for (int dx = lo; dx <= hi; ++dx) set(x + dx, y + dy, c);
    }
  }
}

namespace {

/// Calls pixel(along, col, row) for each set pixel of the glyphs of `s`, `along`
/// being how far the glyph's start is from the text's start, in font pixels.
template <typename Pixel>
void for_each_glyph_pixel(std::string_view s, Pixel&& pixel) noexcept {
  int along = 0;
  for (char ch : s) {
    auto const& g = glyph(ch);
    for (int r = 0; r < glyph_height; ++r) {
      for (int col = 0; col < glyph_width; ++col) {
        if (g[static_cast<std::size_t>(r)] & (1u << (glyph_width - 1 - col))) pixel(along, col, r);
      }
    }
    along += glyph_advance;
  }
}

}  // namespace

void canvas::text(int x, int y, std::string_view s, rgb c, int scale) noexcept {
  for_each_glyph_pixel(s, [&](int along, int col, int row) {
    int const px = x + (along + col) * scale, py = y + row * scale;
    fill_rect(px, py, px + scale - 1, py + scale - 1, c);
  });
}

void canvas::text_up(int x, int y, std::string_view s, rgb c, int scale) noexcept {
  // Glyph pixel (col, row) lands at (x + row, y - col): rotated counter-clockwise.
  for_each_glyph_pixel(s, [&](int along, int col, int row) {
    int const px = x + row * scale, py = y - (along + col) * scale;
    fill_rect(px, py - scale + 1, px + scale - 1, py, c);
  });
}

int canvas::text_width(std::string_view s, int scale) noexcept {
  return s.empty() ? 0 : (static_cast<int>(s.size()) * glyph_advance - 1) * scale;
}

int canvas::text_height(int scale) noexcept { return glyph_height * scale; }

std::string canvas::to_png() const { return encode_png_rgb(width_, height_, px_); }

}  // namespace gpumem::tools
