// Pinned host memory through the shim (programs/host_app.cpp under LD_PRELOAD):
// reuse only after the copies queued before a free ran, flag sets and CUDA's
// answers for pooled blocks, caching, the limit, log rows with the host entry names.

#include "shim_process.hpp"

#include <support/csv_log_reader.hpp>
#include <support/temp_file.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace gpumem::test {
namespace {

process_result run_host(std::string const& scenario, std::map<std::string, std::string> env = {}) {
  env.emplace("LD_PRELOAD", shim_path());
  env.emplace("GPUMEM_SIM_STRICT", "1");
  env.emplace("GPUMEM_HOST_POOL", "1");  // the pool is opt-in
  return run_process({program("shim_host_app"), scenario}, env);
}

TEST(HostMemory, AFreedBlockIsNotReusedWhileAQueuedCopyMayStillWriteIt) {
  auto const r = run_host("reuse");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("RESULT same=0 intact=1 reused_after=1"), std::string::npos) << r.output;
}

TEST(HostMemory, WithoutTheShimTheProgramIsCorrectToo) {
  auto const r = run_process({program("shim_host_app"), "reuse"}, {{"GPUMEM_SIM_STRICT", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("intact=1"), std::string::npos) << r.output;
}

TEST(HostMemory, FlagsAndPointerQueriesAnswerForPooledBlocks) {
  auto const r = run_host("flags");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // cudaHostAllocMapped | cudaHostAllocPortable = 3; cudaErrorInvalidValue = 1.
  EXPECT_NE(r.output.find("RESULT flags=3 dptr=1 type_host=1 other_set=1 plain_flags=0 second_free=1"),
            std::string::npos)
      << r.output;
}

TEST(HostMemory, ALoopPinsOnceWithThePoolAndEveryTimeWithoutIt) {
  auto const pooled = run_host("loop");
  ASSERT_EQ(pooled.exit_code, 0) << pooled.output;
  EXPECT_NE(pooled.output.find("RESULT driver_allocs=1\n"), std::string::npos) << pooled.output;
  auto const plain = run_host("loop", {{"GPUMEM_HOST_POOL", "0"}});
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("RESULT driver_allocs=50\n"), std::string::npos) << plain.output;
  // Unset, the pool is off: every call reaches CUDA.
  auto const unset = run_process({program("shim_host_app"), "loop"},
                                 {{"LD_PRELOAD", shim_path()}, {"GPUMEM_SIM_STRICT", "1"}});
  ASSERT_EQ(unset.exit_code, 0) << unset.output;
  EXPECT_NE(unset.output.find("RESULT driver_allocs=50\n"), std::string::npos) << unset.output;
}

TEST(HostMemory, TheLimitRefusesWithCudasOutOfMemory) {
  auto const r = run_host("limit", {{"GPUMEM_HOST_LIMIT", "1MiB"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // cudaErrorMemoryAllocation = 2.
  EXPECT_NE(r.output.find("RESULT first=0 second=2"), std::string::npos) << r.output;
}

TEST(HostMemory, TheQueryApiCountsPinnedMemoryAndAForkedChildStartsClean) {
  auto const r = run_host("stats");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Two allocations, one freed; 1 MiB is a size class of its own.
  EXPECT_NE(r.output.find("RESULT before=0 built=1 pooled=1 allocations=2 frees=1 live=1048576 reserved_ge_live=1 "
                          "child_clean=1"),
            std::string::npos)
      << r.output;
  auto const plain = run_host("stats", {{"GPUMEM_HOST_POOL", "0"}});
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("built=1 pooled=0 allocations=2 frees=1"), std::string::npos) << plain.output;
}

// Pinned memory dies with the context it was allocated in: under a context the
// program created, the pool could not keep it, so CUDA serves it (counted as passed
// through); under the primary context the host chain serves it.
TEST(HostMemory, AContextTheProgramCreatedGetsCudasOwnPinnedMemory) {
  auto const r = run_host("created");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("RESULT primary=0 served_first=1 created=0 freed=0 passed_to_cuda=2 served=0"),
            std::string::npos)
      << r.output;
}

TEST(HostMemory, LogRowsNameTheHostEntryPoints) {
  temp_file log;
  auto const r = run_host("flags", {{"GPUMEM_LOG_FILE", log.path()}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in{log.path()};
  std::stringstream text;
  text << in.rdbuf();
  std::string const csv = text.str();
  EXPECT_NE(csv.find(",cudaHostAlloc,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",cudaMallocHost,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",cudaFreeHost,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("CUDA_ERROR_INVALID_VALUE"), std::string::npos) << "the refused second free" << csv;
  // Reserved is what the host chain holds (the 10000-byte request's size class, the
  // first row), not a device chain's figure (none was built: it would be empty).
  auto const rows = read_csv_log(log.path()).rows;
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.front().at(column_index(log_column::entry)), "cudaHostAlloc");
  EXPECT_EQ(rows.front().at(column_index(log_column::reserved)), "12288");
}

}  // namespace
}  // namespace gpumem::test
