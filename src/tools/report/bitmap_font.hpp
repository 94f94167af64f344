#pragma once
// A tiny built-in 5x7 bitmap font (printable ASCII letters, digits and the
// punctuation plots use) so the PNG writer needs no font library.

#include <array>
#include <cstdint>

namespace gpumem::tools {

inline constexpr int glyph_width = 5;
inline constexpr int glyph_height = 7;
inline constexpr int glyph_advance = 6;  ///< one column of space between glyphs

/// Rows top to bottom; bit 4 of each row is the leftmost pixel. Characters
/// without a glyph are drawn as '?'.
[[nodiscard]] std::array<std::uint8_t, glyph_height> const& glyph(char c) noexcept;

}  // namespace gpumem::tools
