#include "png_encoder.hpp"

#include <zlib.h>

#include <stdexcept>
#include <vector>

namespace gpumem::tools {

namespace {

void put_be32(std::string& out, std::uint32_t v) {
  out += static_cast<char>(v >> 24);
  out += static_cast<char>(v >> 16);
  out += static_cast<char>(v >> 8);
  out += static_cast<char>(v);
}

/// length, type, data, CRC-32 of type + data (PNG 5.3).
void chunk(std::string& out, char const (&type)[5], std::string const& data) {
  put_be32(out, static_cast<std::uint32_t>(data.size()));
  std::size_t const crc_from = out.size();
  out.append(type, 4);
  out += data;
  auto const* p = reinterpret_cast<Bytef const*>(out.data() + crc_from);
  put_be32(out,
           static_cast<std::uint32_t>(::crc32(::crc32(0L, Z_NULL, 0), p, static_cast<uInt>(out.size() - crc_from))));
}

std::string deflate(std::vector<std::uint8_t> const& raw) {
  uLongf size = ::compressBound(static_cast<uLong>(raw.size()));
  std::string z(size, '\0');
  int const rc = ::compress2(reinterpret_cast<Bytef*>(z.data()), &size, raw.data(), static_cast<uLong>(raw.size()),
                             Z_DEFAULT_COMPRESSION);
  if (rc != Z_OK) throw std::runtime_error{"PNG: zlib compress2 failed (" + std::to_string(rc) + ")"};
  z.resize(size);
  return z;
}

}  // namespace

std::string encode_png_rgb(int width, int height, std::span<std::uint8_t const> rgb) {
  if (width <= 0 || height <= 0 ||
      rgb.size() != static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3) {
    throw std::invalid_argument("encode_png_rgb: image size does not match its pixels");
  }
  auto const row = static_cast<std::size_t>(width) * 3;
  std::vector<std::uint8_t> raw;
  raw.reserve((row + 1) * static_cast<std::size_t>(height));
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);  // filter type None
    auto const* p = rgb.data() + static_cast<std::size_t>(y) * row;
    raw.insert(raw.end(), p, p + row);
  }

  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_be32(ihdr, static_cast<std::uint32_t>(width));
  put_be32(ihdr, static_cast<std::uint32_t>(height));
  ihdr += '\x08';  // bit depth
  ihdr += '\x02';  // colour type: RGB
  ihdr += '\x00';  // compression: deflate
  ihdr += '\x00';  // filter method 0
  ihdr += '\x00';  // no interlace
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", deflate(raw));
  chunk(png, "IEND", {});
  return png;
}

}  // namespace gpumem::tools
