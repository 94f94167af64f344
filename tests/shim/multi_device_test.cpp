// Many devices and many processes under the shim, on two simulated devices: device
// switching from threads, frees with the other device current, peer copies between
// pooled buffers, the same limit on each device, contexts the program creates itself,
// IPC (refused with the fix named; working with GPUMEM_RESOURCE=cuda), and per-rank
// logs and reports of a launched job. Programs run with GPUMEM_SIM_STRICT=1.

#include "shim_process.hpp"
#include "support/csv_log_reader.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace gpumem::test {
namespace {

process_result run_app(std::string const& app, std::vector<std::string> args,
                       std::map<std::string, std::string> env = {}) {
  env.emplace("LD_PRELOAD", shim_path());
  env.emplace("GPUMEM_SIM_STRICT", "1");
  env.emplace("GPUMEM_SIM_DEVICES", "2");
  args.insert(args.begin(), program(app));
  return run_process(args, env);
}

void expect_pass(process_result const& r, std::string const& scenario) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS " + scenario), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("CHECK FAILED"), std::string::npos) << r.output;
}

// Every process's STATS line (the children's too) reports no misuse of the device.
void expect_no_violations(std::string const& output) {
  int lines = 0;
  for (auto at = output.find("STATS "); at != std::string::npos; at = output.find("STATS ", at + 1)) {
    ++lines;
    std::string const line = output.substr(at, output.find('\n', at) - at);
    EXPECT_NE(line.find(" violations=0"), std::string::npos) << output;
  }
  EXPECT_GT(lines, 0);
}

std::string slurp(std::string const& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh folder for one test's files.
std::string temp_dir(std::string const& name) {
  std::string dir = "/tmp/gpumem-multi-" + name + "-" + std::to_string(getpid());
  std::string const cmd = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return dir;
}

void remove_dir(std::string const& dir) {
  std::string const cmd = "rm -rf '" + dir + "'";
  (void)std::system(cmd.c_str());
}

TEST(ShimMultiDevice, ThreadsSwitchDevicesAndFreeWithTheOtherCurrent) {
  auto const r = run_app("shim_multi_app", {"devices"});
  expect_pass(r, "devices");
  EXPECT_EQ(parse_stats(r.output)["violations"], 0);
}

TEST(ShimMultiDevice, PeerCopiesBetweenPooledBuffersOfTwoDevices) {
  auto const r = run_app("shim_multi_app", {"peer"});
  expect_pass(r, "peer");
  EXPECT_NE(r.output.find("PEER 0->1 can_access=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PEER 1->0 can_access=1"), std::string::npos) << r.output;
}

TEST(ShimMultiDevice, StreamOrderedCallsOnAnotherDevicesStreamKeepThatDevicesOrder) {
  auto const r = run_app("shim_multi_app", {"stream-device"});
  expect_pass(r, "stream-device");
  // The scenario must have exercised reuse: a new owner in a freed block's place.
  EXPECT_EQ(r.output.find("STREAM-DEVICE reused=0"), std::string::npos) << r.output;
}

TEST(ShimMultiDevice, TheStreamDeviceScenarioPassesWithoutTheShimToo) {
  std::map<std::string, std::string> env{{"GPUMEM_SIM_STRICT", "1"}, {"GPUMEM_SIM_DEVICES", "2"}};
  auto const r = run_process({program("shim_multi_app"), "stream-device"}, env);
  expect_pass(r, "stream-device");
}

TEST(ShimMultiDevice, TheSameLimitHoldsOnEachDeviceOfOneProcess) {
  auto const r = run_app("shim_multi_app", {"limit", "67108864"}, {{"GPUMEM_LIMIT", "64MiB"}});
  expect_pass(r, "limit");
  EXPECT_NE(r.output.find("MEMINFO device=0 free=66060288 total=67108864"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MEMINFO device=1 free=66060288 total=67108864"), std::string::npos) << r.output;
}

TEST(ShimMultiDevice, APercentLimitResolvesAgainstEachDevicesOwnMemory) {
  auto const r = run_app("shim_multi_app", {"percent"}, {{"GPUMEM_LIMIT", "50%"}});
  expect_pass(r, "percent");
  EXPECT_NE(r.output.find("total=268435456"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("total=134217728"), std::string::npos) << r.output;
}

TEST(ShimContexts, CreatedContextsPassThroughAndNeverShareAPool) {
  auto const r = run_app("shim_ctx_app", {"contexts", "268435456"}, {{"GPUMEM_LIMIT", "256MiB"}});
  expect_pass(r, "contexts");
  auto s = parse_stats(r.output);
  EXPECT_EQ(s["chains"], 2);
  EXPECT_EQ(s["violations"], 0);
}

// A hard cap holds for memory of contexts the program creates too: it is not pooled,
// but charged to the device's limit while it lives (once the device's chain exists).
TEST(ShimContexts, MemoryOfACreatedContextCountsAgainstTheLimit) {
  auto const r = run_app("shim_ctx_app", {"limit", "67108864"}, {{"GPUMEM_LIMIT", "64MiB"}});
  expect_pass(r, "limit");
  EXPECT_NE(r.output.find("MEMINFO primary free=4194304 total=67108864"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("counts against gpumem's limit"), std::string::npos) << r.output;
  EXPECT_EQ(parse_stats(r.output)["failed"], 1);
}

TEST(ShimContexts, TheLimitScenarioPassesWithoutTheShimToo) {
  auto const r = run_process({program("shim_ctx_app"), "limit"}, {{"GPUMEM_SIM_STRICT", "1"}});
  expect_pass(r, "limit");
}

TEST(ShimContexts, TheProgramPassesWithoutTheShimToo) {
  auto const r = run_process({program("shim_ctx_app"), "contexts"}, {{"GPUMEM_SIM_STRICT", "1"}});
  expect_pass(r, "contexts");
}

TEST(ShimIpc, APooledHandleOfASlabPoolIsRefusedAndTheMessageNamesTheFix) {
  auto const r = run_app("shim_multi_app", {"ipc"}, {{"GPUMEM_RESOURCE", "cuda-pool"}});
  expect_pass(r, "ipc");
  EXPECT_NE(r.output.find("cudaIpcGetMemHandle"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("GPUMEM_RESOURCE=cuda"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--resource cuda"), std::string::npos) << r.output;
}

// The default pool shares its pages: another process under gpumem opens exactly the
// allocation (across pages), reads it and writes back.
TEST(ShimIpc, AnotherProcessOpensExactlyThePooledAllocation) {
  auto const r = run_app("shim_multi_app", {"ipc-export"});
  expect_pass(r, "ipc-export");
  expect_pass(r, "ipc-open");
}

// A free while another process has the allocation open is parked: the pool does not
// hand that memory to the next allocation (which would write into the other
// process's view) until the import closed; then the handle no longer opens.
TEST(ShimIpc, AFreeWhileImportedIsParkedUntilTheImportCloses) {
  auto const r = run_app("shim_multi_app", {"ipc-park"});
  expect_pass(r, "ipc-park");
  expect_pass(r, "ipc-hold");
  expect_pass(r, "ipc-stale");
  EXPECT_NE(r.output.find("IPC parked_reused=0"), std::string::npos) << r.output;
}

// The importer outlives the exporter (which frees the block and exits meanwhile):
// its mapping holds the pages. A second open gives the same pointer, counted; a
// close too many is CUDA's error.
TEST(ShimIpc, AnImportOutlivesTheExporterAndOpensAreCounted) {
  auto const r = run_app("shim_multi_app", {"ipc-orphan"});
  expect_pass(r, "ipc-orphan");
  expect_pass(r, "ipc-give");
}

// An importer that exits without closing ends its import all the same: the parked
// block goes back (ipc_parked_bytes returns to 0) and the handle no longer opens.
TEST(ShimIpc, AnImporterThatExitsWithoutClosingGivesTheParkedBlockBack) {
  auto const r = run_app("shim_multi_app", {"ipc-leave"});
  expect_pass(r, "ipc-leave");
  expect_pass(r, "ipc-hold");
  expect_pass(r, "ipc-stale");
  expect_no_violations(r.output);
}

// The exporter resets its device while a child holds a block it freed: the reset
// drops the parked block (never given back to the retired chain when the child
// closes later), the old handle no longer opens, and a new block (maybe at the same
// address) is exported, parked and given back on its own.
TEST(ShimIpc, AnExportersDeviceResetDropsItsExportsAndParkedBlocks) {
  auto const r = run_app("shim_multi_app", {"ipc-reset"});
  expect_pass(r, "ipc-reset");
  expect_pass(r, "ipc-hold");
  expect_pass(r, "ipc-stale");
  expect_no_violations(r.output);
}

// The importer resets its device while it holds an import: the reset unmaps it and
// ends the connection (the exporter gives its parked block back at once); the close
// afterwards is CUDA's error and touches nothing.
TEST(ShimIpc, AnImportersDeviceResetEndsItsImports) {
  auto const r = run_app("shim_multi_app", {"ipc-import-reset"});
  expect_pass(r, "ipc-import-reset");
  expect_pass(r, "ipc-reset-hold");
  expect_pass(r, "ipc-stale");
  expect_no_violations(r.output);
}

// The importer forks a child (as a DataLoader forks workers) and exits without
// closing while the child runs on: the child's copy of the connection does not keep
// the import open, and the exporter gets its parked block back.
TEST(ShimIpc, AForkedChildOfTheImporterDoesNotKeepTheImportOpen) {
  auto const r = run_app("shim_multi_app", {"ipc-fork-leave"});
  expect_pass(r, "ipc-fork-leave");
  expect_pass(r, "ipc-stale");
  expect_no_violations(r.output);
}

// The same import opened in a context the importer made: a reset of the device's
// primary context leaves it open (as it leaves that context), and its close works.
TEST(ShimIpc, AnImportInACreatedContextOutlivesThePrimaryReset) {
  auto const r = run_app("shim_multi_app", {"ipc-import-reset-created"});
  expect_pass(r, "ipc-import-reset-created");
  expect_pass(r, "ipc-reset-hold");
  expect_pass(r, "ipc-stale");
  expect_no_violations(r.output);
}

// A thread that never used CUDA has no context current until the runtime makes one
// (a multiprocessing queue's feeder thread, a framework's worker): gpumem's hooks run
// before the runtime, and pointer queries, memory info, frees and allocations from
// such a thread still answer as CUDA would, served by the pool.
TEST(ShimMultiDevice, CallsFromAThreadWithNoContextCurrentAreServed) {
  auto const r = run_app("shim_multi_app", {"fresh-thread"});
  expect_pass(r, "fresh-thread");
  expect_no_violations(r.output);
}

TEST(ShimIpc, WithResourceCudaAnotherProcessOpensExactlyTheAllocation) {
  auto const r = run_app("shim_multi_app", {"ipc-export"}, {{"GPUMEM_RESOURCE", "cuda"}});
  expect_pass(r, "ipc-export");
  expect_pass(r, "ipc-open");  // the child, under the shim too
}

// Device column of every row of a log.
std::set<std::string> devices_in_log(std::string const& path) {
  std::set<std::string> out;
  for (auto const& row : read_csv_log(path).rows) out.insert(row.at(6));
  return out;
}

TEST(ShimRanks, EachRanksLogAndReportNameItsOwnDeviceOnly) {
  std::string const dir = temp_dir("ranks");
  std::string const gpumem_run = build_dir() + "/bin/gpumem-run";
  for (std::string const rank : {"0", "1"}) {
    auto const r = run_process({gpumem_run, "--log", dir + "/alloc-rank%r.csv", "--report-file", dir + "/report-%r.txt",
                                "--", program("shim_multi_app"), "rank"},
                               {{"RANK", rank}, {"GPUMEM_SIM_DEVICES", "2"}, {"GPUMEM_SIM_STRICT", "1"}});
    expect_pass(r, "rank");
  }
  for (std::string const rank : {"0", "1"}) {
    std::string const other = rank == "0" ? "1" : "0";
    EXPECT_EQ(devices_in_log(dir + "/alloc-rank" + rank + ".csv"), std::set<std::string>{rank});
    std::string const report = slurp(dir + "/report-" + rank + ".txt");
    EXPECT_NE(report.find("device " + rank + ": "), std::string::npos) << report;
    EXPECT_EQ(report.find("device " + other + ": "), std::string::npos) << report;
    EXPECT_NE(report.find("allocations 12 "), std::string::npos) << report;
  }
  remove_dir(dir);
}

// The same through a launcher that runs under the shim itself (torchrun, mpirun):
// the launcher's own exit must not replace rank 0's report or log.
TEST(ShimRanks, ALauncherUnderTheShimLeavesTheRanksFilesAlone) {
  std::string const dir = temp_dir("launcher");
  std::string const gpumem_run = build_dir() + "/bin/gpumem-run";
  auto const r = run_process({gpumem_run, "--log", dir + "/alloc-rank%r.csv", "--report-file", dir + "/report-%r.txt",
                              "--", program("shim_multi_app"), "launcher"},
                             {{"RANK", ""}, {"GPUMEM_SIM_DEVICES", "2"}, {"GPUMEM_SIM_STRICT", "1"}});
  expect_pass(r, "launcher");
  for (std::string const rank : {"0", "1"}) {
    EXPECT_EQ(devices_in_log(dir + "/alloc-rank" + rank + ".csv"), std::set<std::string>{rank});
    std::string const report = slurp(dir + "/report-" + rank + ".txt");
    EXPECT_NE(report.find("device " + rank + ": "), std::string::npos) << report;
  }
  remove_dir(dir);
}

}  // namespace
}  // namespace gpumem::test
