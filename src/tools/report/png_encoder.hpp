#pragma once
// Minimal PNG writer over zlib: 8-bit RGB, filter 0 on every row, the image data
// deflate-compressed (a plot is mostly flat colour: 1.5 MB of pixels become a few
// tens of KB).
// Thread safety: pure function.

#include <cstdint>
#include <span>
#include <string>

namespace gpumem::tools {

/// PNG file of a width x height RGB image, rows top to bottom, 3 bytes per pixel.
/// Throws std::invalid_argument when the pixels do not match the size, and
/// std::runtime_error if zlib fails (out of memory).
[[nodiscard]] std::string encode_png_rgb(int width, int height, std::span<std::uint8_t const> rgb);

}  // namespace gpumem::tools
