// Configuration inputs that used to hang or pass silently, seen from a program
// under the shim: GPUMEM_CONFIG naming a FIFO nobody writes to (an error within
// seconds, not a hang in open()), /dev/null (an empty configuration: the
// defaults), and caps of zero (an error at start instead of every allocation
// failing without a word).
#include "shim_process.hpp"
#include "support/temp_file.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <string>

namespace gpumem::test {
namespace {

// Under timeout(1): a regression hangs the program, not the test.
process_result run_pairs(std::map<std::string, std::string> env) {
  env.emplace("LD_PRELOAD", shim_path());
  return run_process({"/usr/bin/timeout", "30", program("shim_log_app"), "pairs", "3"}, env);
}

TEST(ShimConfigInput, FifoWithoutAWriterStopsWithAMessageInsteadOfHanging) {
  temp_file tmp{"gpumem.fifo"};
  ASSERT_EQ(mkfifo(tmp.path().c_str(), 0600), 0);
  auto const r = run_pairs({{"GPUMEM_CONFIG", tmp.path()}});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("gpumem: config error: environment: GPUMEM_CONFIG: cannot read \"" + tmp.path() +
                          "\": it is a FIFO (pipe) and nothing was written to it within 2 s"),
            std::string::npos)
      << r.output;
}

TEST(ShimConfigInput, DevNullIsAnEmptyConfiguration) {
  auto const r = run_pairs({{"GPUMEM_CONFIG", "/dev/null"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS pairs"), std::string::npos) << r.output;
  EXPECT_EQ(parse_stats(r.output)["chain_allocations"], 3);
}

TEST(ShimConfigInput, ZeroCapsStopAtStartSayingWhy) {
  for (auto const& [var, problem] :
       {std::pair<std::string, std::string>{"GPUMEM_LIMIT", "\"0\" would refuse every allocation"},
        {"GPUMEM_POOL_MAX", "\"0\" lets the pool hold no memory: every allocation would fail"}}) {
    auto const r = run_pairs({{var, "0"}});
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("gpumem: config error: environment: " + var + ": " + problem), std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("PASS"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace gpumem::test
