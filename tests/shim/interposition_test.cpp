// The shim on the simulated device: each program reaches CUDA one way real
// programs do, runs under LD_PRELOAD with GPUMEM_SIM_STRICT=1 (the sim fails the
// process on any rule it saw broken), checks its own results and reports the shim's
// counters, which are checked here.

#include "shim_process.hpp"
#include "support/csv_log_reader.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <string>

namespace gpumem::test {
namespace {

process_result run_app(std::string const& app, std::string const& scenario,
                       std::map<std::string, std::string> env = {}) {
  env.emplace("LD_PRELOAD", shim_path());
  env.emplace("GPUMEM_SIM_STRICT", "1");
  return run_process({program(app), scenario}, env);
}

void expect_pass(process_result const& r, std::string const& scenario) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS " + scenario), std::string::npos) << r.output;
}

TEST(ShimRuntime, ServesEachAllocationOnceFromTheChain) {
  auto const r = run_app("shim_rt_app", "served");
  expect_pass(r, "served");
  auto s = parse_stats(r.output);
  EXPECT_EQ(s["mode"], 1);
  EXPECT_EQ(s["chain_allocations"], 7);
  EXPECT_EQ(s["runtime_allocations"], 7);
  // The device saw pool growth only (mapped memory, the default chain's vmm), not the
  // program's seven allocations (the last one may grow a third time: the 4 MiB freed
  // before it wait below the reclaim threshold, 8 MiB for a small pool).
  EXPECT_EQ(s["sim_cuMemAlloc"], 0);
  EXPECT_GE(s["sim_cuMemCreate"], 1);
  EXPECT_LE(s["sim_cuMemCreate"], 3);
  EXPECT_EQ(s["violations"], 0);
}

TEST(ShimRuntime, GivesCudasResultsForBadInputAndRefusesDoubleFrees) {
  auto const r = run_app("shim_rt_app", "errors");
  expect_pass(r, "errors");
  EXPECT_NE(r.output.find("double free"), std::string::npos) << r.output;
  EXPECT_EQ(parse_stats(r.output)["double_frees"], 2);
}

TEST(ShimRuntime, CrossApiFreesAndDriverEntryPoints) {
  auto const r = run_app("shim_rt_app", "cross");
  expect_pass(r, "cross");
}

TEST(ShimRuntime, SafeModeHoldsAFreedBlockUntilQueuedWorkRan) {
  auto const r = run_app("shim_rt_app", "safe");
  expect_pass(r, "safe");
  EXPECT_NE(r.output.find("REUSED 0"), std::string::npos) << r.output;
}

TEST(ShimRuntime, StreamModeTrustsStreamOrderAndReusesAtOnce) {
  // The opt-in mode's documented trade-off: the block comes back at once, and the
  // late write of the still-queued work lands in the new allocation.
  auto const r = run_app("shim_rt_app", "safe", {{"GPUMEM_SYNC_MODE", "stream"}});
  EXPECT_NE(r.output.find("REUSED 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CHECK FAILED"), std::string::npos) << r.output;
}

TEST(ShimRuntime, CallsCudaRefusesDuringACaptureAreRefusedAsCudaRefusesThem) {
  auto const r = run_app("shim_rt_app", "capture-refusals");
  expect_pass(r, "capture-refusals");
}

TEST(ShimRuntime, TheCaptureRefusalsScenarioPassesWithoutTheShimToo) {
  auto const r = run_process({program("shim_rt_app"), "capture-refusals"}, {{"GPUMEM_SIM_STRICT", "1"}});
  expect_pass(r, "capture-refusals");
}

TEST(ShimRuntime, CaptureStaysValid) {
  auto const r = run_app("shim_rt_app", "capture");
  expect_pass(r, "capture");
  auto s = parse_stats(r.output);
  EXPECT_EQ(s["captured"], 1);
  EXPECT_EQ(s["violations"], 0);
}

TEST(ShimRuntime, OneChainPerDeviceAndResetDropsIt) {
  auto const r = run_app("shim_rt_app", "devices", {{"GPUMEM_SIM_DEVICES", "2"}});
  expect_pass(r, "devices");
}

TEST(ShimRuntime, ForkedChildStartsClean) {
  auto const r = run_app("shim_rt_app", "fork");
  expect_pass(r, "fork");
}

TEST(ShimRuntime, MemGetInfoFollowsTheLimitAndPointerQueriesTheAllocation) {
  auto const r = run_app("shim_rt_app", "queries", {{"GPUMEM_LIMIT", "64MiB"}});
  expect_pass(r, "queries");
  EXPECT_NE(r.output.find("MEMINFO free=50331648 total=67108864"), std::string::npos) << r.output;
}

TEST(ShimRuntime, ConcurrentThreadsEachServedAndFreedOnce) {
  auto const r = run_app("shim_rt_app", "threads");
  expect_pass(r, "threads");
  EXPECT_EQ(parse_stats(r.output)["violations"], 0);
}

TEST(ShimRuntime, DefaultPoolServedOwnPoolsPassedThroughManagedFromItsChain) {
  auto const r = run_app("shim_rt_app", "pools");
  expect_pass(r, "pools");
}

TEST(ShimDriver, DlsymOnLibcudaHandsOutTheHooks) {
  auto const r = run_app("shim_drv_app", "dlsym");
  expect_pass(r, "dlsym");
  EXPECT_EQ(parse_stats(r.output)["violations"], 0);
}

TEST(ShimDriver, CuGetProcAddressHandsOutTheHooks) {
  auto const r = run_app("shim_drv_app", "gpa");
  expect_pass(r, "gpa");
}

// Device memory the program creates and maps itself (as XLA does): the limit covers
// it together with pooled memory (until its last unmap when it is released while
// mapped), cudaMemGetInfo counts it, and the log has every create, release and
// refusal.
TEST(ShimDriver, MemoryTheProgramCreatesItselfIsLimitedCountedAndLogged) {
  std::string const log = "/tmp/gpumem-created-" + std::to_string(::getpid()) + ".csv";
  auto const r = run_app("shim_drv_app", "vmm", {{"GPUMEM_LIMIT", "64MiB"}, {"GPUMEM_LOG_FILE", log}});
  expect_pass(r, "vmm");
  EXPECT_EQ(parse_stats(r.output)["violations"], 0);
  EXPECT_NE(r.output.find("cuMemCreate(50331648 bytes on device 0): refused (out of memory)"), std::string::npos)
      << r.output;
  std::vector<std::string> created;  // action, size, entry, result of each cuMemCreate/cuMemRelease row
  for (auto const& row : read_csv_log(log).rows) {
    if (row.at(7).starts_with("cuMem") && row.at(7) != "cuMemAlloc" && row.at(7) != "cuMemFree") {
      created.push_back(row.at(2) + " " + row.at(4) + " " + row.at(7) + " " + row.at(10));
    }
  }
  std::remove(log.c_str());
  std::vector<std::string> const expected{
      "allocate 33554432 cuMemCreate CUDA_SUCCESS", "allocate failure 50331648 cuMemCreate CUDA_ERROR_OUT_OF_MEMORY",
      "free 33554432 cuMemRelease CUDA_SUCCESS",    "allocate 50331648 cuMemCreate CUDA_SUCCESS",
      "free 50331648 cuMemRelease CUDA_SUCCESS",    "allocate 33554432 cuMemCreate CUDA_SUCCESS",
      "free 33554432 cuMemRelease CUDA_SUCCESS",    "allocate failure 50331648 cuMemCreate CUDA_ERROR_OUT_OF_MEMORY",
      "allocate 50331648 cuMemCreate CUDA_SUCCESS", "free 50331648 cuMemRelease CUDA_SUCCESS",
  };
  EXPECT_EQ(created, expected);
}

TEST(ShimDriver, MemoryCreatedInAContextOfTheProgramsOwnBuildsNoChain) {
  auto const r = run_app("shim_drv_app", "vmm_own_context", {{"GPUMEM_LIMIT", "64MiB"}});
  expect_pass(r, "vmm_own_context");
}

TEST(ShimDisable, PassesEverythingThrough) {
  auto const r = run_app("shim_rt_app", "served", {{"GPUMEM_DISABLE", "1"}});
  expect_pass(r, "served");
  auto s = parse_stats(r.output);
  EXPECT_EQ(s["mode"], 2);
  EXPECT_EQ(s["chain_allocations"], 0);
  EXPECT_EQ(s["sim_cuMemAlloc"], 5);  // each cudaMalloc reached the device (pitch: cuMemAllocPitch)
}

TEST(ShimDisable, DriverPathsGetTheRealFunctions) {
  auto const r = run_app("shim_drv_app", "dlsym", {{"GPUMEM_DISABLE", "1"}});
  EXPECT_EQ(parse_stats(r.output)["mode"], 2) << r.output;
  EXPECT_EQ(parse_stats(r.output)["chain_allocations"], 0) << r.output;
}

}  // namespace
}  // namespace gpumem::test
