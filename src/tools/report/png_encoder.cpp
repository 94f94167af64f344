#include "png_encoder.hpp"

#include <array>
#include <stdexcept>
#include <vector>

namespace gpumem::tools {

namespace {

constexpr std::array<std::uint32_t, 256> make_crc_table() noexcept {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t n = 0; n < 256; ++n) {
    std::uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    t[n] = c;
  }
  return t;
}
constexpr auto crc_table = make_crc_table();

void put_be32(std::string& out, std::uint32_t v) {
  out += static_cast<char>(v >> 24);
  out += static_cast<char>(v >> 16);
  out += static_cast<char>(v >> 8);
  out += static_cast<char>(v);
}

std::span<std::uint8_t const> bytes_of(std::string const& s, std::size_t from = 0) {
  return {reinterpret_cast<std::uint8_t const*>(s.data()) + from, s.size() - from};
}

void chunk(std::string& out, char const (&type)[5], std::string const& data) {
  put_be32(out, static_cast<std::uint32_t>(data.size()));
  std::size_t const crc_from = out.size();
  out.append(type, 4);
  out += data;
  put_be32(out, crc32(bytes_of(out, crc_from)));
}

}  // namespace

std::uint32_t crc32(std::span<std::uint8_t const> data, std::uint32_t crc) noexcept {
  std::uint32_t c = crc ^ 0xffffffffu;
  for (std::uint8_t b : data) c = crc_table[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

std::uint32_t adler32(std::span<std::uint8_t const> data, std::uint32_t adler) noexcept {
  constexpr std::uint32_t mod = 65521;
  std::uint32_t a = adler & 0xffff, b = adler >> 16;
  // 5552 bytes is the most that cannot overflow 32 bits before the modulo.
  std::size_t i = 0;
  while (i < data.size()) {
    std::size_t const n = std::min<std::size_t>(5552, data.size() - i);
    for (std::size_t k = 0; k < n; ++k) {
      a += data[i + k];
      b += a;
    }
    a %= mod;
    b %= mod;
    i += n;
  }
  return (b << 16) | a;
}

std::string zlib_stored(std::span<std::uint8_t const> data) {
  std::string out;
  out.reserve(data.size() + data.size() / 65535 * 5 + 16);
  out += static_cast<char>(0x78);  // CMF: deflate, 32 KiB window
  out += static_cast<char>(0x01);  // FLG: no dictionary, fastest; (0x7801 % 31 == 0)
  std::size_t pos = 0;
  do {
    std::size_t const n = std::min<std::size_t>(65535, data.size() - pos);
    bool const last = pos + n == data.size();
    out += static_cast<char>(last ? 1 : 0);  // BFINAL, BTYPE=00 (stored)
    out += static_cast<char>(n & 0xff);
    out += static_cast<char>(n >> 8);
    out += static_cast<char>(~n & 0xff);
    out += static_cast<char>((~n >> 8) & 0xff);
    out.append(reinterpret_cast<char const*>(data.data()) + pos, n);
    pos += n;
  } while (pos < data.size());
  put_be32(out, adler32(data));
  return out;
}

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
  chunk(png, "IDAT", zlib_stored(raw));
  chunk(png, "IEND", {});
  return png;
}

}  // namespace gpumem::tools
