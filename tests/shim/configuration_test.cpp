// A configuration the shim cannot use stops the program at its first allocation
// with one clear message (exit 1) — never a run with a different configuration —
// unless on_error = passthrough, which warns and passes everything to CUDA.

#include "shim_process.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace gpumem::test {
namespace {

process_result run_served(std::map<std::string, std::string> env) {
  env.emplace("LD_PRELOAD", shim_path());
  env.emplace("GPUMEM_SIM_STRICT", "1");
  return run_process({program("shim_rt_app"), "served"}, env);
}

std::string write_config(std::string const& name, std::string const& text) {
  std::string const path = "/tmp/gpumem-shim-test-" + std::to_string(getpid()) + "-" + name;
  std::ofstream{path} << text;
  return path;
}

TEST(ShimConfiguration, BadEnvironmentValueExitsWithTheMessage) {
  auto const r = run_served({{"GPUMEM_POOL_SIZE", "12XB"}});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("GPUMEM_POOL_SIZE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("12XB"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("PASS"), std::string::npos) << r.output;
}

TEST(ShimConfiguration, UnwritableLogPathStopsAtStartNamingThePath) {
  auto const r = run_served({{"GPUMEM_LOG_FILE", "/nonexistent-gpumem-dir/alloc-%p.csv"}});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot write the allocation log '/nonexistent-gpumem-dir/alloc-"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("No such file or directory"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("PASS"), std::string::npos) << r.output;

  auto const passthrough = run_served(
      {{"GPUMEM_LOG_FILE", "/nonexistent-gpumem-dir/alloc.csv"}, {"GPUMEM_ON_ERROR", "passthrough"}});
  EXPECT_NE(passthrough.output.find("cannot write the allocation log"), std::string::npos) << passthrough.output;
}

TEST(ShimConfiguration, BadFileNamesFileLineAndKey) {
  auto const path = write_config("bad.toml", "[gpumem]\nsync_mode = \"fast\"\n");
  auto const r = run_served({{"GPUMEM_CONFIG", path}});
  std::remove(path.c_str());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(path + ":2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sync_mode"), std::string::npos) << r.output;
}

TEST(ShimConfiguration, MissingFileExits) {
  auto const r = run_served({{"GPUMEM_CONFIG", "/nonexistent/gpumem.toml"}});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/gpumem.toml"), std::string::npos) << r.output;
}

TEST(ShimConfiguration, BrokenTomlSyntaxExits) {
  auto const path = write_config("syntax.toml", "[gpumem\nreport = true\n");
  auto const r = run_served({{"GPUMEM_CONFIG", path}});
  std::remove(path.c_str());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(path), std::string::npos) << r.output;
}

TEST(ShimConfiguration, PassthroughPolicyWarnsAndRunsOnPlainCuda) {
  auto const r = run_served({{"GPUMEM_POOL_SIZE", "12XB"}, {"GPUMEM_ON_ERROR", "passthrough"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("GPUMEM_POOL_SIZE"), std::string::npos) << r.output;
  auto s = parse_stats(r.output);
  EXPECT_EQ(s["mode"], 3);
  EXPECT_EQ(s["chain_allocations"], 0);
  EXPECT_EQ(s["sim_cuMemAlloc"], 5);
}

TEST(ShimConfiguration, ProgramWithoutAllocationsIsNotStopped) {
  // The error surfaces at the first allocation, not at load: a process that never
  // allocates (a launcher, a shell) runs normally.
  auto const r = run_process({"/bin/sh", "-c", "exit 0"}, {{"LD_PRELOAD", shim_path()}, {"GPUMEM_POOL_SIZE", "12XB"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(ShimConfiguration, LogLevelIsTypedAndChoosesWhatIsSaid) {
  // The chain's description is said at info level, once per device.
  auto const quiet = run_served({});
  EXPECT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("gpumem: device 0: "), std::string::npos) << quiet.output;
  auto const info = run_served({{"GPUMEM_LOG_LEVEL", "info"}});
  EXPECT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("gpumem: device 0: pool"), std::string::npos) << info.output;

  // A typo is a configuration error naming the choices, never a silent default.
  auto const typo = run_served({{"GPUMEM_LOG_LEVEL", "loud"}});
  EXPECT_EQ(typo.exit_code, 1) << typo.output;
  EXPECT_NE(typo.output.find("GPUMEM_LOG_LEVEL: unknown value \"loud\" (valid: trace|debug|info|warn|error|off)"),
            std::string::npos)
      << typo.output;
}

TEST(ShimConfiguration, AChainThatCannotBeBuiltSaysWhyEvenWithLoggingOff) {
  // The file loads (log_level = "off" applies), the chain's log path fails when the
  // chain is built: the process's last words are printed whatever the level.
  auto const path = write_config("unbuildable.toml",
                                 "[gpumem]\nlog_level = \"off\"\n"
                                 "[[chain]]\ntype = \"logging\"\nfile = \"/nonexistent-gpumem-dir/calls.csv\"\n"
                                 "[[chain]]\ntype = \"cuda\"\n");
  auto const r = run_served({{"GPUMEM_CONFIG", path}});
  std::remove(path.c_str());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("gpumem: config error: " + path), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/nonexistent-gpumem-dir/calls.csv"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gpumem: refusing to run with a different configuration"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("PASS"), std::string::npos) << r.output;
}

std::size_t count(std::string const& text, std::string const& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A chain the device cannot hold (a pool larger than the device) is a configuration
// that cannot be honoured: with 8 threads allocating at once, one message and exit 1,
// as for a configuration that does not load; with on_error = passthrough, one message
// and plain CUDA. Never a failed call and a message per allocation, each retrying the
// build.
TEST(ShimConfiguration, AChainTheDeviceCannotHoldIsSaidOnceAndFollowsOnError) {
  std::string const why = "device 0: cannot build the resource chain: ";
  auto churn = [](std::map<std::string, std::string> env) {
    env.emplace("LD_PRELOAD", shim_path());
    env.emplace("GPUMEM_SIM_DEVICE_MEMORY", "1GiB");
    return run_process({program("shim_rt_app"), "churn"}, env);
  };
  auto const path = write_config("too-big.toml",
                                 "[[chain]]\ntype = \"pool\"\ninitial_size = \"2GiB\"\n"
                                 "[[chain]]\ntype = \"vmm\"\n");
  auto const file = churn({{"GPUMEM_CONFIG", path}});
  EXPECT_EQ(file.exit_code, 1) << file.output;
  EXPECT_EQ(count(file.output, why), 1U) << file.output;
  EXPECT_NE(file.output.find("gpumem: refusing to run with a different configuration"), std::string::npos)
      << file.output;
  EXPECT_EQ(file.output.find("PASS"), std::string::npos) << file.output;

  auto const env = churn({{"GPUMEM_POOL_SIZE", "2GiB"}});
  EXPECT_EQ(env.exit_code, 1) << env.output;
  EXPECT_EQ(count(env.output, why), 1U) << env.output;

  auto const passthrough = churn({{"GPUMEM_CONFIG", path}, {"GPUMEM_ON_ERROR", "passthrough"}});
  std::remove(path.c_str());
  EXPECT_EQ(passthrough.exit_code, 0) << passthrough.output;
  EXPECT_EQ(count(passthrough.output, why), 1U) << passthrough.output;
  EXPECT_NE(passthrough.output.find("device 0 passes every call to CUDA (on_error = passthrough)"), std::string::npos)
      << passthrough.output;
  EXPECT_NE(passthrough.output.find("SERVED 4000 FAILED 0"), std::string::npos) << passthrough.output;
  auto s = parse_stats(passthrough.output);
  EXPECT_EQ(s["chain_allocations"], 0);
  EXPECT_EQ(s["passthrough_allocations"], 4000);
}

}  // namespace
}  // namespace gpumem::test
