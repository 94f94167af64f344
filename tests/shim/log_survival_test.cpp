// Issue 4 §1: every row of an event that completed before the process died is in
// the allocation log — after SIGKILL, a segmentation fault and abort(). A program
// under the shim logs 61 known events (40 allocations, 20 frees, 1 failure) and
// dies; the test reads the log back and counts complete rows.
#include "shim_process.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

struct log_counts {
  int header = 0, allocate = 0, free = 0, failure = 0, partial = 0;
};

// Rows end in '\n'; a crash may leave NUL padding after the last row (documented in
// csv_log_writer.hpp) — anything after the last newline must be NULs only.
log_counts count_rows(std::string const& path) {
  std::ifstream in{path, std::ios::binary};
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  log_counts c;
  auto const last_nl = text.rfind('\n');
  std::string const tail = last_nl == std::string::npos ? text : text.substr(last_nl + 1);
  if (tail.find_first_not_of('\0') != std::string::npos) ++c.partial;
  text.resize(last_nl == std::string::npos ? 0 : last_nl + 1);
  std::istringstream lines{text};
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("Thread,Time,Action,Pointer,Size,Stream", 0) == 0) ++c.header;
    else if (line.find(",allocate failure,") != std::string::npos) ++c.failure;
    else if (line.find(",allocate,") != std::string::npos) ++c.allocate;
    else if (line.find(",free,") != std::string::npos) ++c.free;
    else ++c.partial;
  }
  return c;
}

class LogSurvival : public ::testing::TestWithParam<std::pair<char const*, int>> {};

TEST_P(LogSurvival, EveryCompletedEventIsInTheLog) {
  auto const [how, signal] = GetParam();
  std::string const log = ::testing::TempDir() + "gpumem-survival-" + how + ".csv";
  std::remove(log.c_str());
  auto const r = run_process({program("shim_rt_app"), "die", how},
                             {{"LD_PRELOAD", shim_path()}, {"GPUMEM_LOG_FILE", log}});
  ASSERT_NE(r.output.find("EVENTS 61"), std::string::npos) << r.output;
  EXPECT_EQ(r.exit_code, 128 + signal) << r.output;
  auto const c = count_rows(log);
  EXPECT_EQ(c.header, 1);
  EXPECT_EQ(c.allocate, 40);
  EXPECT_EQ(c.free, 20);
  EXPECT_EQ(c.failure, 1);
  EXPECT_EQ(c.partial, 0);
  std::remove(log.c_str());
}

INSTANTIATE_TEST_SUITE_P(Deaths, LogSurvival,
                         ::testing::Values(std::pair{"kill", SIGKILL}, std::pair{"segv", SIGSEGV},
                                           std::pair{"abort", SIGABRT}),
                         [](auto const& param_info) { return std::string{param_info.param.first}; });

}  // namespace
}  // namespace gpumem::test
