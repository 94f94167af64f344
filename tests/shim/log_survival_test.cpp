// Every row of an event that completed before the process died is in the
// allocation log once its journal is recovered (as gpumem-report and
// gpumem-replay do) — after SIGKILL, a segmentation fault and abort(). A program
// under the shim logs 61 known events (40 allocations, 20 frees, 1 failure) and
// dies; the test recovers the log, reads it back and counts complete rows.
#include "shim_process.hpp"
#include "support/csv_log_reader.hpp"

#include <gpumem/row_journal.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>

namespace gpumem::test {
namespace {

// Complete rows by action; read_csv_log counts incomplete lines as bad.
struct log_counts {
  int allocate = 0, free = 0, failure = 0;
};

log_counts count_actions(csv_log_contents const& log) {
  log_counts c;
  for (auto const& row : log.rows) {
    if (row[2] == "allocate")
      ++c.allocate;
    else if (row[2] == "free")
      ++c.free;
    else if (row[2] == "allocate failure")
      ++c.failure;
  }
  return c;
}

class LogSurvival : public ::testing::TestWithParam<std::pair<char const*, int>> {};

void expect_every_event(char const* how, int signal) {
  std::string const log = ::testing::TempDir() + "gpumem-survival-" + how + ".csv";
  std::remove(log.c_str());
  std::remove((log + ".journal").c_str());
  auto const r = run_process({program("shim_rt_app"), "die", how},
                             {{"LD_PRELOAD", shim_path()}, {"GPUMEM_LOG_FILE", log}});
  ASSERT_NE(r.output.find("EVENTS 61"), std::string::npos) << r.output;
  EXPECT_EQ(r.exit_code, 128 + signal) << r.output;
  journal_recovery const rec = recover_journal(log);
  EXPECT_TRUE(rec.found) << "the journal outlives the process that wrote it";
  EXPECT_TRUE(rec.error.empty()) << rec.error;
  EXPECT_EQ(rec.lost, 0U);
  EXPECT_NE(::access((log + ".journal").c_str(), F_OK), 0) << "the journal is removed once recovered";
  auto const contents = read_csv_log(log);
  EXPECT_EQ(contents.header.rfind("Thread,Time,Action,Pointer,Size,Stream,", 0), 0U) << contents.header;
  EXPECT_EQ(contents.bad_lines, 0U);
  EXPECT_EQ(contents.rows.size(), 61U);
  auto const c = count_actions(contents);
  EXPECT_EQ(c.allocate, 40);
  EXPECT_EQ(c.free, 20);
  EXPECT_EQ(c.failure, 1);
  std::remove(log.c_str());
}

TEST_P(LogSurvival, EveryCompletedEventIsInTheLogOnceItsJournalIsRecovered) {
  expect_every_event(GetParam().first, GetParam().second);
}

INSTANTIATE_TEST_SUITE_P(Deaths, LogSurvival,
                         ::testing::Values(std::pair{"kill", SIGKILL}, std::pair{"segv", SIGSEGV},
                                           std::pair{"abort", SIGABRT}),
                         [](auto const& param_info) { return std::string{param_info.param.first}; });

}  // namespace
}  // namespace gpumem::test
