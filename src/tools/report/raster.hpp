#pragma once
// An RGB pixel canvas with the few primitives a plot needs: rectangles, lines of
// some thickness, and text in the built-in 5x7 bitmap font (scaled by whole pixels).
// Drawing outside the canvas is clipped, never an error.
// Thread safety: a canvas is a plain value (no shared state); one writer at a time.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::tools {

struct rgb {
  std::uint8_t r{}, g{}, b{};
  friend bool operator==(rgb, rgb) = default;
};

class canvas {
 public:
  canvas(int width, int height, rgb background = {255, 255, 255});

  [[nodiscard]] int width() const noexcept { return width_; }
  [[nodiscard]] int height() const noexcept { return height_; }
  [[nodiscard]] rgb at(int x, int y) const noexcept;
  [[nodiscard]] std::vector<std::uint8_t> const& pixels() const noexcept { return px_; }

  void set(int x, int y, rgb c) noexcept;
  void fill_rect(int x0, int y0, int x1, int y1, rgb c) noexcept;  ///< inclusive corners
  /// Line from (x0,y0) to (x1,y1), `thickness` pixels wide (square pen).
  void line(double x0, double y0, double x1, double y1, rgb c, int thickness = 1) noexcept;
  /// Text with its top-left corner at (x, y); each font pixel becomes scale x scale.
  void text(int x, int y, std::string_view s, rgb c, int scale = 1) noexcept;
  /// Text turned 90 degrees counter-clockwise (reads bottom to top), left edge at x,
  /// baseline start at y.
  void text_up(int x, int y, std::string_view s, rgb c, int scale = 1) noexcept;
  [[nodiscard]] static int text_width(std::string_view s, int scale = 1) noexcept;
  [[nodiscard]] static int text_height(int scale = 1) noexcept;

  /// PNG file of the canvas.
  [[nodiscard]] std::string to_png() const;

 private:
  int width_, height_;
  std::vector<std::uint8_t> px_;
};

}  // namespace gpumem::tools
