// gpumem's one diagnostics path (diagnostics.hpp): typed levels and their
// spellings, the process-wide threshold, the line format (one write per line, the
// prefix never doubled, long lines never cut), and the messages that go through it
// (failed frees, rate-limited).

#include <gpumem/detail/resource_errors.hpp>
#include <gpumem/diagnostics.hpp>

#include <support/stderr_capture.hpp>

#include <gtest/gtest.h>

#include <string>

namespace gpumem {
namespace {

/// Restores the threshold a test changed.
struct level_guard {
  log_level saved = current_log_level();
  ~level_guard() { set_log_level(saved); }
};

int count(std::string const& text, std::string const& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

TEST(Diagnostics, EveryLevelHasOneSpelling) {
  for (auto l :
       {log_level::trace, log_level::debug, log_level::info, log_level::warn, log_level::error, log_level::off}) {
    auto const name = to_string(l);
    EXPECT_NE(log_level_choices.find(name), std::string_view::npos) << name;
    EXPECT_EQ(parse_log_level(name), l) << name;
  }
  // A typo is no level at all (a configuration reports it), never a silent default.
  for (char const* wrong : {"", "WARN", "warning", "verbose", "err", "warn "}) {
    EXPECT_FALSE(parse_log_level(wrong).has_value()) << '"' << wrong << '"';
  }
}

TEST(Diagnostics, TheThresholdDecidesWhatIsWritten) {
  level_guard guard;
  set_log_level(log_level::error);
  EXPECT_FALSE(log_enabled(log_level::warn));
  EXPECT_TRUE(log_enabled(log_level::error));
  set_log_level(log_level::trace);
  EXPECT_TRUE(log_enabled(log_level::trace));
  EXPECT_FALSE(log_enabled(log_level::off));  // off is never a message's level
  set_log_level(log_level::off);
  EXPECT_FALSE(log_enabled(log_level::error));

  set_log_level(log_level::warn);
  test::stderr_capture err;
  log_message(log_level::info, "not %s", "shown");
  log_message(log_level::warn, "shown %d", 1);
  log_message(log_level::error, "gpumem: config error: already prefixed");
  set_log_level(log_level::off);
  log_message(log_level::error, "silenced");
  log_unfiltered("last words");
  EXPECT_EQ(err.text(), "gpumem: shown 1\ngpumem: config error: already prefixed\ngpumem: last words\n");
}

TEST(Diagnostics, ALongLineIsWrittenWhole) {
  level_guard guard;
  set_log_level(log_level::warn);
  std::string const path(3000, 'p');
  test::stderr_capture err;
  log_message(log_level::warn, "cannot open '%s': the reason at the end", path.c_str());
  EXPECT_EQ(err.text(), "gpumem: cannot open '" + path + "': the reason at the end\n");
}

TEST(Diagnostics, FailedFreesAreReportedAtErrorLevelAndRateLimited) {
  level_guard guard;
  set_log_level(log_level::off);
  {
    test::stderr_capture err;
    detail::report_free_failure("cuMemFree_v2", CUDA_ERROR_INVALID_VALUE, reinterpret_cast<void*>(0x1000));
    EXPECT_EQ(err.text(), "");  // silenced, and not counted against the limit
  }
  set_log_level(log_level::warn);
  test::stderr_capture err;
  for (int i = 0; i < 40; ++i) {
    detail::report_free_failure("cuMemFree_v2", CUDA_ERROR_INVALID_VALUE, reinterpret_cast<void*>(0x1000));
  }
  std::string const text = err.text();
  EXPECT_EQ(count(text, "gpumem: cuMemFree_v2(0x1000) failed: CUDA_ERROR_INVALID_VALUE\n"), 16) << text;
  EXPECT_EQ(count(text, "gpumem: further failed frees are counted but not reported\n"), 1) << text;
  EXPECT_EQ(count(text, "\n"), 17) << text;
}

}  // namespace
}  // namespace gpumem
