#pragma once
// Minimal PNG writer with no library behind it: 8-bit RGB, filter 0 on every row,
// the zlib stream made of "stored" (uncompressed) deflate blocks. Files are large
// (3 bytes per pixel) but any viewer reads them.
// Thread safety: pure functions (the CRC table is a constant).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace gpumem::tools {

/// CRC-32 (ISO 3309, as PNG chunks use), continuing from `crc` (0 to start).
[[nodiscard]] std::uint32_t crc32(std::span<std::uint8_t const> data, std::uint32_t crc = 0) noexcept;

/// Adler-32 (zlib trailer), continuing from `adler` (1 to start).
[[nodiscard]] std::uint32_t adler32(std::span<std::uint8_t const> data, std::uint32_t adler = 1) noexcept;

/// zlib stream (RFC 1950) of `data` in stored deflate blocks (RFC 1951 §3.2.4).
[[nodiscard]] std::string zlib_stored(std::span<std::uint8_t const> data);

/// PNG file of a width x height RGB image, rows top to bottom, 3 bytes per pixel.
[[nodiscard]] std::string encode_png_rgb(int width, int height, std::span<std::uint8_t const> rgb);

}  // namespace gpumem::tools
