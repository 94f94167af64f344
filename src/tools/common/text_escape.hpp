#pragma once
// Text from a log (paths, entry points, result codes, offending lines) is bytes the
// tools do not control: NULs, terminal escape sequences, invalid UTF-8. These
// functions make it safe for each output: valid UTF-8 passes through; control
// characters and bytes that are not UTF-8 become visible escapes.
//
// Thread safety: pure functions.

#include <string>
#include <string_view>

namespace gpumem::tools {

/// For terminals and plain text: control characters and invalid bytes as "\xNN".
[[nodiscard]] std::string escape_text(std::string_view s);

/// For HTML text and attribute values: &, <, >, " and ' as entities, and control
/// characters and invalid bytes as "\xNN".
[[nodiscard]] std::string escape_html(std::string_view s);

/// A JSON string literal, quotes included: control characters as \uNNNN (\n, \t,
/// \r, \", \\ in short form) and invalid bytes as \u00NN, so the result is always
/// valid JSON in valid UTF-8.
[[nodiscard]] std::string json_string(std::string_view s);

}  // namespace gpumem::tools
