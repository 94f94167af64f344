// Managed memory through the shim (programs/managed_app.cpp under LD_PRELOAD): the
// managed chain serves cudaMallocManaged; with the pool on, reuse only after the
// work queued before a free ran; advice, prefetch and pointer queries on pooled
// blocks; attach flags kept apart; caching, the limit, the counters and log rows.

#include "shim_process.hpp"

#include <support/temp_file.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace gpumem::test {
namespace {

process_result run_managed(std::string const& scenario, std::map<std::string, std::string> env = {}) {
  env.emplace("LD_PRELOAD", shim_path());
  env.emplace("GPUMEM_SIM_STRICT", "1");
  env.emplace("GPUMEM_MANAGED_POOL", "1");  // the pool is opt-in
  return run_process({program("shim_managed_app"), scenario}, env);
}

TEST(ManagedMemory, AFreedBlockIsNotReusedWhileQueuedWorkMayStillWriteIt) {
  auto const r = run_managed("reuse");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("RESULT same=0 intact=1 reused_after=1"), std::string::npos) << r.output;
  // Stream mode trusts the program, as RMM does: the block comes back at once.
  auto const trusting = run_managed("reuse", {{"GPUMEM_SYNC_MODE", "stream"}});
  ASSERT_EQ(trusting.exit_code, 0) << trusting.output;
  EXPECT_NE(trusting.output.find("RESULT same=1"), std::string::npos) << trusting.output;
}

TEST(ManagedMemory, WithoutTheShimTheProgramIsCorrectToo) {
  auto const r = run_process({program("shim_managed_app"), "reuse"}, {{"GPUMEM_SIM_STRICT", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("intact=1"), std::string::npos) << r.output;
}

// cudaErrorInvalidValue = 1. The address range is the request (10000 bytes), as for
// device blocks; the attach flags get pools of their own.
TEST(ManagedMemory, AdvicePrefetchAndPointerQueriesWorkOnPooledBlocks) {
  std::string const expected =
      "RESULT advise=0 prefetch=0 type_managed=1 range_start=1 range_size=10000 interior_free=1 other_flag=1 "
      "second_free=1 bad_flags=1";
  auto const pooled = run_managed("queries");
  ASSERT_EQ(pooled.exit_code, 0) << pooled.output;
  EXPECT_NE(pooled.output.find(expected), std::string::npos) << pooled.output;
  auto const plain = run_managed("queries", {{"GPUMEM_MANAGED_POOL", "0"}});
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find(expected), std::string::npos) << plain.output;
}

TEST(ManagedMemory, ALoopAllocatesOnceWithThePoolAndEveryTimeWithoutIt) {
  auto const pooled = run_managed("loop");
  ASSERT_EQ(pooled.exit_code, 0) << pooled.output;
  EXPECT_NE(pooled.output.find("RESULT driver_allocs=1\n"), std::string::npos) << pooled.output;
  auto const unset = run_process({program("shim_managed_app"), "loop"},
                                 {{"LD_PRELOAD", shim_path()}, {"GPUMEM_SIM_STRICT", "1"}});
  ASSERT_EQ(unset.exit_code, 0) << unset.output;
  EXPECT_NE(unset.output.find("RESULT driver_allocs=50\n"), std::string::npos) << unset.output;
}

TEST(ManagedMemory, TheLimitRefusesWithCudasOutOfMemoryPooledOrNot) {
  for (char const* pool : {"1", "0"}) {
    auto const r = run_managed("limit", {{"GPUMEM_MANAGED_LIMIT", "1MiB"}, {"GPUMEM_MANAGED_POOL", pool}});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // cudaErrorMemoryAllocation = 2.
    EXPECT_NE(r.output.find("RESULT first=0 second=2"), std::string::npos) << pool << "\n" << r.output;
  }
}

TEST(ManagedMemory, TheQueryApiCountsManagedMemory) {
  auto const r = run_managed("stats");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("RESULT before=0 built=1 pooled=1 allocations=2 frees=1 live=1048576 reserved_ge_live=1"),
            std::string::npos)
      << r.output;
  auto const plain = run_managed("stats", {{"GPUMEM_MANAGED_POOL", "0"}});
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("built=1 pooled=0 allocations=2 frees=1"), std::string::npos) << plain.output;
}

// The blocks of a reset device died with its context: the pool never hands them out
// again, and the limit counts them freed (the two new blocks fit under 2 MiB).
TEST(ManagedMemory, ADeviceResetForgetsTheBlocksItKilled) {
  auto const r = run_managed("reset", {{"GPUMEM_MANAGED_LIMIT", "2MiB"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("RESULT first=0 second=0 driver_allocs=2 live=2097152"), std::string::npos) << r.output;
}

TEST(ManagedMemory, LogRowsAndTheReportNameManagedMemory) {
  temp_file log;
  temp_file report;
  auto const r = run_managed("queries", {{"GPUMEM_LOG_FILE", log.path()}, {"GPUMEM_REPORT_FILE", report.path()}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in{log.path()};
  std::stringstream text;
  text << in.rdbuf();
  std::string const csv = text.str();
  EXPECT_NE(csv.find(",allocate,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",cudaMallocManaged,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("CUDA_ERROR_INVALID_VALUE"), std::string::npos) << "the refused frees" << csv;
  std::ifstream rin{report.path()};
  std::stringstream rtext;
  rtext << rin.rdbuf();
  EXPECT_NE(rtext.str().find("managed: managed pool per attach flag and device"), std::string::npos) << rtext.str();
}

}  // namespace
}  // namespace gpumem::test
