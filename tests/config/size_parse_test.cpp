// parse_size / size_value / format_bytes: the accepted forms and every rejection.

#include <gpumem/config/size_parse.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace gc = gpumem::config;

namespace {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = KiB * 1024;
constexpr std::uint64_t GiB = MiB * 1024;
constexpr std::uint64_t TiB = GiB * 1024;

struct good_case {
  std::string text;
  std::uint64_t bytes;
};

class SizeParseGood : public ::testing::TestWithParam<good_case> {};

TEST_P(SizeParseGood, ParsesToExactBytes) {
  gc::size_value const v = gc::parse_size(GetParam().text);
  EXPECT_FALSE(v.is_percent) << GetParam().text;
  EXPECT_EQ(v.bytes, GetParam().bytes) << GetParam().text;
}

INSTANTIATE_TEST_SUITE_P(
    Table, SizeParseGood,
    ::testing::Values(good_case{"0", 0}, good_case{"4096", 4096}, good_case{"  4096  ", 4096}, good_case{"+7", 7},
                      good_case{"256B", 256}, good_case{"256 b", 256}, good_case{"8GiB", 8 * GiB},
                      good_case{"8gib", 8 * GiB}, good_case{"8 GiB", 8 * GiB}, good_case{"8G", 8 * GiB},
                      good_case{"8g", 8 * GiB}, good_case{"8GB", 8'000'000'000}, good_case{"512MB", 512'000'000},
                      good_case{"512MiB", 512 * MiB}, good_case{"512M", 512 * MiB}, good_case{"64KiB", 64 * KiB},
                      good_case{"64K", 64 * KiB}, good_case{"64kB", 64'000}, good_case{"2TiB", 2 * TiB},
                      good_case{"2TB", 2'000'000'000'000}, good_case{"2T", 2 * TiB}, good_case{"1.5GiB", 1'610'612'736},
                      good_case{"0.5KiB", 512}, good_case{".5KiB", 512},
                      good_case{"1.1GiB", 1'181'116'006},  // 1181116006.4 rounded down
                      good_case{"1.KiB", 1024}, good_case{"0GiB", 0},
                      good_case{"18446744073709551615", 18'446'744'073'709'551'615ULL},
                      good_case{"17179869183.99999GiB", 18'446'744'073'709'540'878ULL},
                      good_case{"15.99999999999999999999TiB", 17'592'186'044'415ULL}),
    [](auto const& param_info) { return "Case" + std::to_string(param_info.index); });

struct bad_case {
  std::string text;
  std::string message;
};

class SizeParseBad : public ::testing::TestWithParam<bad_case> {};

TEST_P(SizeParseBad, RejectsWithExactMessage) {
  try {
    (void)gc::parse_size(GetParam().text);
    FAIL() << "accepted " << GetParam().text;
  } catch (gc::config_error const& e) { EXPECT_EQ(std::string{e.what()}, GetParam().message); }
}

INSTANTIATE_TEST_SUITE_P(
    Table, SizeParseBad,
    ::testing::Values(bad_case{"", R"("": empty size)"}, bad_case{"   ", R"("   ": empty size)"},
                      bad_case{"-1", R"("-1": negative size)"}, bad_case{"-1GiB", R"("-1GiB": negative size)"},
                      bad_case{"GiB", R"("GiB": not a number)"}, bad_case{".", R"(".": not a number)"},
                      bad_case{"%", R"("%": not a number)"}, bad_case{"12XB", R"("12XB": unknown unit "XB")"},
                      bad_case{"1 2", R"("1 2": unknown unit "2")"},
                      bad_case{"1.5", R"("1.5": fractional number of bytes)"},
                      bad_case{"1.5B", R"("1.5B": fractional number of bytes)"},
                      bad_case{"18446744073709551616",
                               R"("18446744073709551616": too large (more than 2^64 - 1 bytes))"},
                      bad_case{"16777216TiB", R"("16777216TiB": too large (more than 2^64 - 1 bytes))"},
                      bad_case{"17179869184GiB", R"("17179869184GiB": too large (more than 2^64 - 1 bytes))"},
                      bad_case{"18446744.99TB", R"("18446744.99TB": too large (more than 2^64 - 1 bytes))"},
                      bad_case{"100.5%", R"("100.5%": percentage above 100%)"},
                      bad_case{"101%", R"("101%": percentage above 100%)"}, bad_case{"-5%", R"("-5%": negative size)"}),
    [](auto const& param_info) { return "Case" + std::to_string(param_info.index); });

TEST(SizeParse, Percentages) {
  EXPECT_EQ(gc::parse_size("50%"), gc::size_value::of_percent(50.0));
  EXPECT_EQ(gc::parse_size("12.5 %"), gc::size_value::of_percent(12.5));
  EXPECT_EQ(gc::parse_size("0%"), gc::size_value::of_percent(0.0));
  EXPECT_EQ(gc::parse_size("100%"), gc::size_value::of_percent(100.0));
}

TEST(SizeValue, ResolvesPercentOfFreeRoundedDownTo256) {
  EXPECT_EQ(gc::size_value::of_percent(50).resolve(GiB), 512 * MiB);
  EXPECT_EQ(gc::size_value::of_percent(100).resolve(1000), 768U);  // 1000 → 768: a multiple of 256
  EXPECT_EQ(gc::size_value::of_percent(10).resolve(3000), 256U);   // 300 → 256
  EXPECT_EQ(gc::size_value::of_percent(0).resolve(GiB), 0U);
  EXPECT_EQ(gc::size_value::of_bytes(1000).resolve(GiB), 1000U);  // absolute: unchanged
}

TEST(SizeValue, ToString) {
  EXPECT_EQ(gc::size_value::of_percent(50).to_string(), "50%");
  EXPECT_EQ(gc::size_value::of_percent(12.5).to_string(), "12.5%");
  EXPECT_EQ(gc::size_value::of_bytes(8 * GiB).to_string(), "8 GiB");
}

TEST(FormatBytes, HumanUnits) {
  EXPECT_EQ(gc::format_bytes(0), "0 B");
  EXPECT_EQ(gc::format_bytes(1000), "1000 B");
  EXPECT_EQ(gc::format_bytes(1023), "1023 B");
  EXPECT_EQ(gc::format_bytes(1024), "1 KiB");
  EXPECT_EQ(gc::format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(gc::format_bytes(256 * MiB), "256 MiB");
  EXPECT_EQ(gc::format_bytes(1'610'612'736), "1.5 GiB");
  EXPECT_EQ(gc::format_bytes(MiB + MiB / 4), "1.25 MiB");
  EXPECT_EQ(gc::format_bytes(70 * GiB), "70 GiB");
  EXPECT_EQ(gc::format_bytes(3 * TiB), "3 TiB");
  EXPECT_EQ(gc::format_bytes(2048 * TiB), "2048 TiB");
}

}  // namespace
