// Text from a log reaches terminals, HTML and JSON safely.
#include "text_escape.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace gpumem::tools;
using namespace std::string_literals;

TEST(TextEscape, TerminalTextKeepsUtf8AndShowsControlBytes) {
  EXPECT_EQ(escape_text("cudaMalloc"), "cudaMalloc");
  EXPECT_EQ(escape_text("a\0b"s), "a\\x00b");
  EXPECT_EQ(escape_text("\x1b[31mred\x07\n\x7f"), "\\x1b[31mred\\x07\\x0a\\x7f");
  EXPECT_EQ(escape_text("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  // Not UTF-8: a lone continuation byte, a truncated sequence, an overlong form, a surrogate.
  EXPECT_EQ(escape_text("\x80 \xc3 \xc0\xaf \xed\xa0\x80"), "\\x80 \\xc3 \\xc0\\xaf \\xed\\xa0\\x80");
}

TEST(TextEscape, HtmlEscapesMarkupAndControlBytes) {
  EXPECT_EQ(escape_html("<b>&\"'"), "&lt;b&gt;&amp;&quot;&#39;");
  EXPECT_EQ(escape_html("x\0y\x01"s), "x\\x00y\\x01");
  EXPECT_EQ(escape_html("\xc3\xa9"), "\xc3\xa9");
}

TEST(TextEscape, JsonStringsAreAlwaysValid) {
  EXPECT_EQ(json_string("plain"), "\"plain\"");
  EXPECT_EQ(json_string("q\"b\\"), "\"q\\\"b\\\\\"");
  EXPECT_EQ(json_string("n\nt\tr\r"), "\"n\\nt\\tr\\r\"");
  EXPECT_EQ(json_string("\0\x1f\x7f"s), "\"\\u0000\\u001f\\u007f\"");
  EXPECT_EQ(json_string("\xff\xc3\xa9"), "\"\\u00ff\xc3\xa9\"");
}
