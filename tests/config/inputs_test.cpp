// load(): GPUMEM_CONFIG naming something other than a regular file (a FIFO, a
// pipe from process substitution, /dev/null, an endless device), and caps of zero
// (a limit or pool maximum of 0 would fail every allocation without a word).

#include <gpumem/config.hpp>

#include <support/temp_file.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

namespace gc = gpumem::config;

namespace {

gc::environment env_of(std::map<std::string, std::string, std::less<>> vars) {
  gc::environment e;
  e.vars = std::move(vars);
  return e;
}

/// load()'s message for `env`, "" if it succeeded.
std::string error_of(gc::environment const& env) {
  try {
    (void)gc::load(env);
  } catch (gc::config_error const& e) { return e.what(); }
  return "";
}

std::string const E = "gpumem: config error: ";
std::string const read_hint = " (set it to a readable TOML file, or unset it to use the embedded default)";
std::string const report_on = "[gpumem]\nreport = true\n";

std::vector<std::string> types_of(gc::settings const& s) {
  std::vector<std::string> out;
  for (auto const& e : s.chain) out.push_back(e.type);
  return out;
}

TEST(ConfigInput, FifoWithoutAWriterIsAnErrorNotAHang) {
  gpumem::test::temp_file tmp{"config.fifo"};
  ASSERT_EQ(::mkfifo(tmp.path().c_str(), 0600), 0);
  auto const start = std::chrono::steady_clock::now();
  EXPECT_EQ(error_of(env_of({{"GPUMEM_CONFIG", tmp.path()}})),
            E + "environment: GPUMEM_CONFIG: cannot read \"" + tmp.path() +
                "\": it is a FIFO (pipe) and nothing was written to it within 2 s (a named pipe needs a writer "
                "that closes it; or use a regular file)" +
                read_hint);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds{10});
}

TEST(ConfigInput, FifoWithAWriterIsRead) {
  gpumem::test::temp_file tmp{"config.fifo"};
  ASSERT_EQ(::mkfifo(tmp.path().c_str(), 0600), 0);
  std::thread writer{[&] {
    std::ofstream out{tmp.path()};  // opens once the reader has
    out << report_on;
  }};
  gc::settings const s = gc::load(env_of({{"GPUMEM_CONFIG", tmp.path()}}));
  writer.join();
  EXPECT_TRUE(s.report);
  EXPECT_EQ(types_of(s), (std::vector<std::string>{"pool", "vmm"}));
}

// GPUMEM_CONFIG=<(echo ...): a pipe the shell already filled.
TEST(ConfigInput, PipeFromProcessSubstitutionIsRead) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], report_on.data(), report_on.size()), static_cast<ssize_t>(report_on.size()));
  ::close(fds[1]);
  gc::settings const s = gc::load(env_of({{"GPUMEM_CONFIG", "/dev/fd/" + std::to_string(fds[0])}}));
  ::close(fds[0]);
  EXPECT_TRUE(s.report);
}

TEST(ConfigInput, DevNullIsAnEmptyConfiguration) {
  gc::settings const s = gc::load(env_of({{"GPUMEM_CONFIG", "/dev/null"}}));
  EXPECT_EQ(s.source, "/dev/null");
  EXPECT_FALSE(s.report);
  EXPECT_EQ(types_of(s), (std::vector<std::string>{"pool", "vmm"}));  // the embedded default chain
}

TEST(ConfigInput, EndlessDeviceIsRefused) {
  EXPECT_EQ(error_of(env_of({{"GPUMEM_CONFIG", "/dev/zero"}})),
            E +
                "environment: GPUMEM_CONFIG: cannot read \"/dev/zero\": it is a character device and delivered "
                "more than 1 MiB without an end" +
                read_hint);
}

struct zero_case {
  const char* name;
  std::map<std::string, std::string, std::less<>> env;
  std::string toml;     ///< written to a file and named by GPUMEM_CONFIG when not empty
  std::string message;  ///< after "gpumem: config error: "; "$F" stands for the file
};

void PrintTo(zero_case const& c, std::ostream* os) { *os << c.name; }

class ZeroCap : public ::testing::TestWithParam<zero_case> {};

TEST_P(ZeroCap, IsAConfigErrorSayingWhy) {
  auto const& c = GetParam();
  gpumem::test::temp_file tmp{"zero.toml"};
  auto env = c.env;
  if (!c.toml.empty()) {
    std::ofstream{tmp.path()} << c.toml;
    env["GPUMEM_CONFIG"] = tmp.path();
  }
  std::string expected = E + c.message;
  if (auto const at = expected.find("$F"); at != std::string::npos) expected.replace(at, 2, tmp.path());
  EXPECT_EQ(error_of(env_of(env)), expected);
}

std::string const limiting_then_pool =
    "[[chain]]\ntype = \"limiting\"\nlimit = 0\n\n[[chain]]\ntype = \"pool\"\n\n"
    "[[chain]]\ntype = \"cuda\"\n";

INSTANTIATE_TEST_SUITE_P(
    Caps, ZeroCap,
    ::testing::Values(
        zero_case{"env_limit",
                  {{"GPUMEM_LIMIT", "0"}},
                  "",
                  "environment: GPUMEM_LIMIT: \"0\" would refuse every allocation (unset it for no limit, or give a "
                  "size above 0)"},
        zero_case{"env_limit_percent",
                  {{"GPUMEM_LIMIT", "0%"}},
                  "",
                  "environment: GPUMEM_LIMIT: \"0%\" would refuse every allocation (unset it for no limit, or give "
                  "a size above 0)"},
        zero_case{"env_pool_max",
                  {{"GPUMEM_POOL_MAX", "0"}},
                  "",
                  "environment: GPUMEM_POOL_MAX: \"0\" lets the pool hold no memory: every allocation would fail "
                  "(unset it for no cap, or give a size above 0)"},
        zero_case{"toml_limit",
                  {},
                  limiting_then_pool,
                  "$F:1:1: chain[0].limit: limit 0 B would refuse every allocation (omit the limiting entry for no "
                  "limit, or give a size above 0)"},
        zero_case{"toml_limit_text",
                  {},
                  "[[chain]]\ntype = \"limiting\"\nlimit = \"0MiB\"\n\n[[chain]]\ntype = \"cuda\"\n",
                  "$F:1:1: chain[0].limit: limit 0 B would refuse every allocation (omit the limiting entry for no "
                  "limit, or give a size above 0)"},
        zero_case{"toml_pool_max",
                  {},
                  "[[chain]]\ntype = \"pool\"\nmaximum_size = \"0\"\n\n[[chain]]\ntype = \"cuda\"\n",
                  "$F:1:1: chain[0].maximum_size: maximum 0 B lets the pool hold no memory: every allocation would "
                  "fail (omit maximum_size for no cap, or give a size above 0)"},
        zero_case{"toml_pool_max_percent",
                  {},
                  "[[chain]]\ntype = \"pool\"\nmaximum_size = \"0%\"\n\n[[chain]]\ntype = \"cuda\"\n",
                  "$F:1:1: chain[0].maximum_size: maximum 0% lets the pool hold no memory: every allocation would "
                  "fail (omit maximum_size for no cap, or give a size above 0)"}),
    [](auto const& param_info) { return std::string{param_info.param.name}; });

}  // namespace
