// Safe mode through the shim: each promise of docs/cuda-semantics.md ("What a
// program may rely on") in a program (programs/safe_app.cpp) run under LD_PRELOAD
// on the simulated device in strict mode, with a 1 MiB pool so that every reuse is
// forced. The program's host functions stand in for kernels and count work that ran
// after the next owner's work (PROBE violations).

#include "shim_process.hpp"
#include "support/sim_control.hpp"

#include <gtest/gtest.h>

#include <string>

namespace gpumem::test {
namespace {

process_result run_safe(std::string const& scenario, std::map<std::string, std::string> env = {}) {
  env.emplace("LD_PRELOAD", shim_path());
  env.emplace("GPUMEM_SIM_STRICT", "1");
  env.emplace("GPUMEM_POOL_SIZE", "1MiB");
  env.emplace("GPUMEM_POOL_MAX", "1MiB");
  return run_process({program("shim_safe_app"), scenario}, env);
}

long probe_value(std::string const& output, std::string const& key) {
  auto const at = output.find("PROBE ");
  if (at == std::string::npos) return -1;
  auto const k = output.find(key + "=", at);
  if (k == std::string::npos) return -1;
  return std::stol(output.substr(k + key.size() + 1));
}

void expect_safe(process_result const& r, std::string const& scenario) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS " + scenario), std::string::npos) << r.output;
  EXPECT_EQ(probe_value(r.output, "violations"), 0) << r.output;
  EXPECT_GT(probe_value(r.output, "ran"), 0) << r.output;
  auto s = parse_stats(r.output);
  EXPECT_EQ(s["device_syncs"], 0) << "safe mode must not block the host on the device";
  EXPECT_EQ(s["violations"], 0);
}

TEST(SafeMode, CudaMallocMemoryIsUsableAtOnceOnAnyStream) {
  auto const r = run_safe("malloc_any_stream");
  expect_safe(r, "malloc_any_stream");
  EXPECT_NE(r.output.find("REUSED 1"), std::string::npos) << "the test must force the reuse: " << r.output;
  EXPECT_GE(parse_stats(r.output)["barriers"], 1);
}

TEST(SafeMode, CudaFreedMemoryWaitsForAllEarlierWork) {
  auto const r = run_safe("free_then_reuse");
  expect_safe(r, "free_then_reuse");
  EXPECT_NE(r.output.find("REUSED 1"), std::string::npos) << r.output;
}

TEST(SafeMode, WorkInGreenContextsIsOrderedBeforeTheNextOwner) {
  if (!sim_control::get().present()) GTEST_SKIP() << "tests/gpu/green_context_test.cu checks a GPU";
  auto const r = run_safe("green_contexts");
  expect_safe(r, "green_contexts");
  EXPECT_NE(r.output.find("REUSED 6 "), std::string::npos) << "every round must reuse the block: " << r.output;
  auto const uses = r.output.find("USES ");
  ASSERT_NE(uses, std::string::npos) << r.output;
  EXPECT_EQ(probe_value(r.output, "ran"), std::stol(r.output.substr(uses + 5))) << "a use never ran: " << r.output;
  auto s = parse_stats(r.output);
  EXPECT_EQ(s["passthrough_allocations"], 1) << "memory allocated in the green context goes to CUDA";
  EXPECT_EQ(s["passthrough_frees"], 1);
}

TEST(SafeMode, CrossFamilyFreesKeepTheStrongerPromise) { expect_safe(run_safe("cross_family"), "cross_family"); }

TEST(SafeMode, EightThreadsMixingFamiliesAndStreams) {
  auto const r = run_safe("threads", {{"GPUMEM_POOL_SIZE", "4MiB"}, {"GPUMEM_POOL_MAX", "4MiB"}});
  expect_safe(r, "threads");
  EXPECT_NE(r.output.find("OOM 0"), std::string::npos) << r.output;
}

// Stream mode trusts stream order, as RMM does: programs that rely on cudaFree's
// synchronization get corrupted there. That is why it is not the default (and this
// shows the probe does catch the corruption).
TEST(SafeMode, StreamModeDoesNotKeepThesePromises) {
  if (!sim_control::get().present()) {
    // The simulated device runs stream work late on purpose, so the race is certain
    // there; on a GPU it depends on timing (tests/gpu/stress_test.cu shows it).
    GTEST_SKIP() << "needs the simulated device's late stream work";
  }
  auto const r = run_safe("malloc_any_stream", {{"GPUMEM_SYNC_MODE", "stream"}});
  EXPECT_GT(probe_value(r.output, "violations"), 0) << r.output;
}

TEST(SafeMode, DestroyedAndMadeUpStreamsGetCudasErrorAndKeepThePointer) {
  if (!sim_control::get().present()) {
    // Real CUDA has no error to compare with: driver 580 dies with SIGSEGV in every
    // stream-ordered call on a destroyed or made-up stream, with or without gpumem.
    GTEST_SKIP() << "real CUDA crashes on a destroyed or made-up stream";
  }
  auto const r = run_process({program("shim_safe_app"), "bad_streams"}, {{"LD_PRELOAD", shim_path()}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS bad_streams"), std::string::npos) << r.output;
  EXPECT_EQ(parse_stats(r.output)["double_frees"], 2);  // the two deliberate ones only
}

TEST(SafeMode, AStaleSecondFreeInsidePoolMemoryNeverReachesCuda) {
  auto const r = run_safe("stale_double_free", {{"GPUMEM_POOL_SIZE", "8MiB"}, {"GPUMEM_POOL_MAX", "8MiB"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;  // strict mode: the sim saw no unknown free either
  EXPECT_NE(r.output.find("PASS stale_double_free"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not the start of an allocation gpumem handed out"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gpumem::test
