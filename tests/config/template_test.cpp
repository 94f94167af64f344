// expand_template / check_template with a hand-made environment.

#include <gpumem/config.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <string>

namespace gc = gpumem::config;

namespace {

std::string host() {
  std::array<char, 256> buf{};
  EXPECT_EQ(gethostname(buf.data(), buf.size() - 1), 0);
  return buf.data();
}

gc::environment env_of(std::map<std::string, std::string, std::less<>> vars) {
  gc::environment e;
  e.vars = std::move(vars);
  return e;
}

TEST(ExpandTemplate, EveryPlaceholder) {
  auto const env = env_of({{"RANK", "3"}});
  std::string const pid = std::to_string(getpid());
  EXPECT_EQ(gc::expand_template("log-%p.csv", 0, env), "log-" + pid + ".csv");
  EXPECT_EQ(gc::expand_template("r%r-d%d", 5, env), "r3-d5");
  EXPECT_EQ(gc::expand_template("%h.csv", 0, env), host() + ".csv");
  EXPECT_EQ(gc::expand_template("100%%-%d", 1, env), "100%-1");
  EXPECT_EQ(gc::expand_template("plain.csv", 0, env), "plain.csv");
  EXPECT_EQ(gc::expand_template("", 0, env), "");
}

TEST(ExpandTemplate, UnknownSequencesAndTrailingPercentAreKept) {
  auto const env = env_of({});
  EXPECT_EQ(gc::expand_template("a%xb", 0, env), "a%xb");
  EXPECT_EQ(gc::expand_template("end%", 0, env), "end%");
}

TEST(ExpandTemplate, RankVariablesInPriorityOrder) {
  EXPECT_EQ(gc::expand_template("%r", 0, env_of({})), "0");
  EXPECT_EQ(gc::expand_template("%r", 0, env_of({{"RANK", "9"}})), "9");
  EXPECT_EQ(gc::expand_template("%r", 0, env_of({{"RANK", "9"}, {"SLURM_PROCID", "8"}})), "8");
  EXPECT_EQ(gc::expand_template("%r", 0, env_of({{"RANK", "9"}, {"SLURM_PROCID", "8"}, {"PMIX_RANK", "7"}})), "7");
  EXPECT_EQ(gc::expand_template("%r", 0, env_of({{"PMIX_RANK", "7"}, {"PMI_RANK", "6"}})), "6");
  EXPECT_EQ(gc::expand_template("%r", 0, env_of({{"PMI_RANK", "6"}, {"OMPI_COMM_WORLD_RANK", "5"}, {"RANK", "9"}})),
            "5");
  // An empty variable counts as unset.
  EXPECT_EQ(gc::expand_template("%r", 0, env_of({{"OMPI_COMM_WORLD_RANK", ""}, {"RANK", "4"}})), "4");
}

TEST(ExpandTemplate, ProcessEnvironmentOverload) {
  ASSERT_EQ(setenv("OMPI_COMM_WORLD_RANK", "12", 1), 0);
  EXPECT_EQ(gc::expand_template("%r-%d", 2), "12-2");
  ASSERT_EQ(unsetenv("OMPI_COMM_WORLD_RANK"), 0);
}

TEST(ExpandTemplate, ForkedChildGetsItsOwnPid) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t const child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string const s = gc::expand_template("%p", 0, gc::environment{});
    ssize_t const n = write(fds[1], s.data(), s.size());
    _exit(n == static_cast<ssize_t>(s.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::array<char, 64> buf{};
  ssize_t const n = read(fds[0], buf.data(), buf.size());
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf.data(), static_cast<std::size_t>(n)), std::to_string(child));
  EXPECT_NE(std::to_string(child), std::to_string(getpid()));
}

TEST(CheckTemplate, Problems) {
  EXPECT_EQ(gc::check_template("gpumem-%p-%r-%h-%d-%%.csv"), "");
  EXPECT_EQ(gc::check_template("a%x"), "unknown placeholder %x");
  EXPECT_EQ(gc::check_template("a%"), "ends with a lone %");
}

TEST(Environment, FromProcessKeepsGpumemAndRankVariablesOnly) {
  ASSERT_EQ(setenv("GPUMEM_TEST_SNAPSHOT", "x", 1), 0);
  ASSERT_EQ(setenv("PMI_RANK", "2", 1), 0);
  ASSERT_EQ(setenv("UNRELATED_VARIABLE_FOR_TEST", "y", 1), 0);
  auto const env = gc::environment::from_process();
  ASSERT_NE(env.find("GPUMEM_TEST_SNAPSHOT"), nullptr);
  EXPECT_EQ(*env.find("GPUMEM_TEST_SNAPSHOT"), "x");
  ASSERT_NE(env.find("PMI_RANK"), nullptr);
  EXPECT_EQ(*env.find("PMI_RANK"), "2");
  EXPECT_EQ(env.vars.count("UNRELATED_VARIABLE_FOR_TEST"), 0U);
  EXPECT_EQ(env.vars.count("PATH"), 0U);
  unsetenv("GPUMEM_TEST_SNAPSHOT");
  unsetenv("PMI_RANK");
  unsetenv("UNRELATED_VARIABLE_FOR_TEST");
}

}  // namespace
