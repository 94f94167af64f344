// gpumem-run: option parsing (unit) and end to end (exit codes, environment,
// LD_PRELOAD, log templates, --report).

#include "run_options.hpp"
#include "shim_check.hpp"
#include "shim_process.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace gpumem::test {
namespace {

std::string gpumem_run() { return build_dir() + "/bin/gpumem-run"; }

TEST(RunOptions, MapsOptionsToEnvironment) {
  auto const o = run::parse_arguments({"--pool-size", "8GiB", "--limit=50%", "--log", "a-%p.csv", "--report",
                                       "--sync-mode", "stream", "--resource", "cuda", "--", "prog", "-x"});
  ASSERT_EQ(o.env.size(), 6U);
  EXPECT_EQ(o.env[0], (std::pair<std::string, std::string>{"GPUMEM_POOL_SIZE", "8GiB"}));
  EXPECT_EQ(o.env[1], (std::pair<std::string, std::string>{"GPUMEM_LIMIT", "50%"}));
  EXPECT_EQ(o.env[2], (std::pair<std::string, std::string>{"GPUMEM_LOG_FILE", "a-%p.csv"}));
  EXPECT_EQ(o.env[3], (std::pair<std::string, std::string>{"GPUMEM_REPORT", "1"}));
  EXPECT_EQ(o.env[4], (std::pair<std::string, std::string>{"GPUMEM_SYNC_MODE", "stream"}));
  EXPECT_EQ(o.env[5], (std::pair<std::string, std::string>{"GPUMEM_RESOURCE", "cuda"}));
  EXPECT_EQ(o.command, (std::vector<std::string>{"prog", "-x"}));
}

TEST(RunOptions, CommandMayFollowWithoutDoubleDash) {
  auto const o = run::parse_arguments({"--disable", "python", "--pool-size", "1"});
  EXPECT_EQ(o.env.size(), 1U);
  EXPECT_EQ(o.command, (std::vector<std::string>{"python", "--pool-size", "1"}));
}

TEST(RunOptions, StackOptionsSetTheirVariables) {
  auto const o = run::parse_arguments({"--stacks", "16", "--stack-sample=64", "--stack-min-size", "1MiB", "--", "p"});
  using kv = std::pair<std::string, std::string>;
  EXPECT_EQ(o.env, (std::vector<kv>{
                       {"GPUMEM_STACKS", "16"}, {"GPUMEM_STACK_SAMPLE", "64"}, {"GPUMEM_STACK_MIN_SIZE", "1MiB"}}));
  for (auto const* bad : {"129", "-1", "16x", ""}) {
    try {
      (void)run::parse_arguments({"--stacks", bad, "--", "p"});
      ADD_FAILURE() << bad;
    } catch (std::invalid_argument const& e) {
      EXPECT_NE(std::string{e.what()}.find("--stacks"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW((void)run::parse_arguments({"--stack-sample", "0", "--", "p"}), std::invalid_argument);
  EXPECT_NE(run::usage().find("--stacks N"), std::string::npos);
}

TEST(RunOptions, HostOptionsSetTheirVariables) {
  auto const o = run::parse_arguments({"--host-pool", "--host-limit", "2GiB", "--", "p"});
  using kv = std::pair<std::string, std::string>;
  EXPECT_EQ(o.env, (std::vector<kv>{{"GPUMEM_HOST_POOL", "1"}, {"GPUMEM_HOST_LIMIT", "2GiB"}}));
  EXPECT_THROW((void)run::parse_arguments({"--host-limit", "lots", "--", "p"}), std::invalid_argument);
  EXPECT_THROW((void)run::parse_arguments({"--host-limit", "50%", "--", "p"}), std::invalid_argument);
  EXPECT_NE(run::usage().find("--host-pool"), std::string::npos);
}

TEST(RunOptions, ReleaseThresholdTakesAutoUnlimitedOrAnAbsoluteSize) {
  using kv = std::pair<std::string, std::string>;
  for (auto const* good : {"auto", "unlimited", "0", "4GiB", "1.5GB"}) {
    EXPECT_EQ(run::parse_arguments({"--release-threshold", good, "--", "p"}).env,
              (std::vector<kv>{{"GPUMEM_RELEASE_THRESHOLD", good}}));
  }
  EXPECT_EQ(run::parse_arguments({"--release-threshold=auto", "p"}).env,
            (std::vector<kv>{{"GPUMEM_RELEASE_THRESHOLD", "auto"}}));
  auto const message = [](char const* bad) {
    try {
      (void)run::parse_arguments({"--release-threshold", bad, "--", "p"});
    } catch (std::invalid_argument const& e) { return std::string{e.what()}; }
    return std::string{"(accepted)"};
  };
  EXPECT_EQ(message("10%"), "--release-threshold: \"10%\" is a percentage; this option needs an absolute size");
  EXPECT_EQ(message("never"), "--release-threshold: \"never\": not a number");
  EXPECT_EQ(message("-1"), "--release-threshold: \"-1\": negative size");
  EXPECT_NE(run::usage().find("--release-threshold"), std::string::npos);
  EXPECT_NE(run::usage().find("GPUMEM_RELEASE_THRESHOLD"), std::string::npos);
}

TEST(RunOptions, RejectsBadInput) {
  EXPECT_THROW((void)run::parse_arguments({"--pool-size", "12XB", "--", "p"}), std::invalid_argument);
  EXPECT_THROW((void)run::parse_arguments({"--pool-max", "-1", "--", "p"}), std::invalid_argument);
  EXPECT_THROW((void)run::parse_arguments({"--sync-mode", "fast", "--", "p"}), std::invalid_argument);
  EXPECT_THROW((void)run::parse_arguments({"--log-level", "loud", "--", "p"}), std::invalid_argument);
  EXPECT_THROW((void)run::parse_arguments({"--frobnicate", "--", "p"}), std::invalid_argument);
  EXPECT_THROW((void)run::parse_arguments({"--limit"}), std::invalid_argument);
  EXPECT_THROW((void)run::parse_arguments({"--report=1", "p"}), std::invalid_argument);
  EXPECT_THROW((void)run::parse_arguments({"--report", "--"}), std::invalid_argument);
  try {
    (void)run::parse_arguments({"--pool-size", "12XB", "p"});
  } catch (std::invalid_argument const& e) {
    EXPECT_NE(std::string{e.what()}.find("--pool-size"), std::string::npos);
    EXPECT_NE(std::string{e.what()}.find("XB"), std::string::npos);
  }
  EXPECT_TRUE(run::parse_arguments({"--help"}).help);
  EXPECT_TRUE(run::parse_arguments({"--version"}).version);
}

TEST(RunOptions, AForgottenValueIsNamed) {
  for (auto const& args : std::vector<std::vector<std::string>>{{"--pool-size", "--", "prog"},
                                                                {"--pool-size", "--limit", "1GiB", "prog"},
                                                                {"--pool-size"},
                                                                {"--pool-size=", "prog"}}) {
    try {
      (void)run::parse_arguments(args);
      ADD_FAILURE() << "accepted " << args[0] << " " << (args.size() > 1 ? args[1] : "");
    } catch (std::invalid_argument const& e) { EXPECT_EQ(std::string{e.what()}, "--pool-size needs a value"); }
  }
  // A value starting with "--" is still possible inline.
  auto const o = run::parse_arguments({"--log=--odd.csv", "prog"});
  EXPECT_EQ(o.env.at(0).second, "--odd.csv");
}

TEST(RunOptions, PrependsTheShimOnce) {
  EXPECT_EQ(run::prepend_preload("/l/s.so", ""), "/l/s.so");
  EXPECT_EQ(run::prepend_preload("/l/s.so", "/a.so /b.so"), "/l/s.so:/a.so:/b.so");
  EXPECT_EQ(run::prepend_preload("/l/s.so", "/a.so:/l/s.so"), "/l/s.so:/a.so");
}

TEST(RunOptions, FindsTheShimNextToItselfOrAtGpumemShim) {
  EXPECT_EQ(run::find_shim(build_dir() + "/bin", ""), build_dir() + "/lib/libgpumem_shim.so");
  EXPECT_EQ(run::find_shim("/nonexistent", "/nonexistent/x.so"), "");
  EXPECT_EQ(run::find_shim("/nonexistent", shim_path()), shim_path());
}

TEST(ShimCheck, AcceptsTheShimAndNamesWhatIsWrongWithOtherFiles) {
  EXPECT_EQ(run::check_shim(shim_path()), "");
  auto const text = run::check_shim("/etc/passwd");
  EXPECT_NE(text.find("/etc/passwd: not a loadable shared library"), std::string::npos) << text;
  // A shared library, but not the shim: the simulated libcuda.
  auto const other = build_dir() + "/simdevice/libcuda.so.1";
  auto const lib = run::check_shim(other);
  EXPECT_NE(lib.find("not gpumem's shim"), std::string::npos) << lib;
}

TEST(GpumemRun, ForgottenValueStopsBeforeRunning) {
  auto const r = run_process({gpumem_run(), "--pool-size", "--", "/bin/sh", "-c", "echo RAN"}, {});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "gpumem-run: --pool-size needs a value\n");
}

TEST(GpumemRun, RefusesAShimThatIsNotOne) {
  for (std::string const& bad : {std::string{"/etc/passwd"}, build_dir() + "/simdevice/libcuda.so.1"}) {
    auto const r = run_process({gpumem_run(), "--", "/bin/sh", "-c", "echo RAN"}, {{"GPUMEM_SHIM", bad}});
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
    EXPECT_EQ(r.output.find("RAN"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("gpumem-run: GPUMEM_SHIM=" + bad + ": "), std::string::npos) << r.output;
  }
  auto const missing = run_process({gpumem_run(), "--", "/bin/true"}, {{"GPUMEM_SHIM", "/nonexistent/shim.so"}});
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("/nonexistent/shim.so"), std::string::npos) << missing.output;
  auto const good = run_process({gpumem_run(), "--", "/bin/sh", "-c", "echo RAN"}, {{"GPUMEM_SHIM", shim_path()}});
  EXPECT_EQ(good.exit_code, 0) << good.output;
  EXPECT_EQ(good.output, "RAN\n");
}

TEST(GpumemRun, ExitCodeAndEnvironmentPassThrough) {
  auto const r = run_process({gpumem_run(), "--pool-size", "64MiB", "--", "/bin/sh", "-c",
                              "echo \"PRELOAD=$LD_PRELOAD POOL=$GPUMEM_POOL_SIZE\"; exit 3"},
                             {{"LD_PRELOAD", "/other.so"}});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("PRELOAD=" + shim_path() + ":/other.so POOL=64MiB"), std::string::npos) << r.output;
}

TEST(GpumemRun, RejectsABadSizeBeforeRunning) {
  auto const r = run_process({gpumem_run(), "--limit", "lots", "--", "/bin/sh", "-c", "echo RAN"}, {});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.find("RAN"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--limit"), std::string::npos) << r.output;
}

TEST(GpumemRun, MissingProgramIs127) {
  auto const r = run_process({gpumem_run(), "--", "/nonexistent/program"}, {});
  EXPECT_EQ(r.exit_code, 127) << r.output;
}

TEST(GpumemRun, HelpShowsExamples) {
  auto const r = run_process({gpumem_run(), "--help"}, {});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("torchrun"), std::string::npos);
  EXPECT_NE(r.output.find("mpirun"), std::string::npos);
  EXPECT_NE(r.output.find("PyTorch"), std::string::npos);
}

TEST(GpumemRun, LogTemplateExpandsPidRankHostAndDevice) {
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  std::string const dir = "/tmp";
  std::string const pattern = dir + "/gpumem-run-test-%p-r%r-%h-d%d.csv";
  auto const r = run_process({gpumem_run(), "--log", pattern, "--", program("shim_rt_app"), "served"}, {{"RANK", "3"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // exec keeps the pid: the program's pid is the one printed by the program itself.
  auto s = parse_stats(r.output);
  EXPECT_EQ(s["chain_allocations"], 7);
  std::string const pid_marker = "PID ";
  auto const at = r.output.find(pid_marker);
  ASSERT_NE(at, std::string::npos) << r.output;
  std::string const pid = r.output.substr(at + pid_marker.size(), r.output.find('\n', at) - at - pid_marker.size());
  std::string const path = dir + "/gpumem-run-test-" + pid + "-r3-" + host + "-d0.csv";
  std::ifstream in{path};
  ASSERT_TRUE(in.good()) << path;
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header, "Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result,Reserved,Stack");
  int allocs = 0;
  int frees = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(",allocate,") != std::string::npos) ++allocs;
    if (line.find(",free,") != std::string::npos) ++frees;
  }
  EXPECT_EQ(allocs, 7);
  EXPECT_EQ(frees, 7);
  std::remove(path.c_str());
}

TEST(GpumemRun, LogRecordsFailuresAndRefusedDoubleFrees) {
  std::string const path = "/tmp/gpumem-run-test-errors-" + std::to_string(getpid()) + ".csv";
  auto const r = run_process({gpumem_run(), "--log", path, "--", program("shim_rt_app"), "errors"}, {});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in{path};
  ASSERT_TRUE(in.good()) << path;
  int double_frees = 0;
  int failed_allocs = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find(",free,") != std::string::npos && line.find(",cudaFree,") != std::string::npos &&
        line.find(",CUDA_ERROR_INVALID_VALUE,") != std::string::npos) {
      ++double_frees;
    }
    if (line.find(",allocate failure,") != std::string::npos &&
        line.find(",CUDA_ERROR_OUT_OF_MEMORY,") != std::string::npos) {
      ++failed_allocs;
    }
  }
  EXPECT_GE(double_frees, 1);   // the refused double free (and CUDA's answer to the unknown one)
  EXPECT_EQ(failed_allocs, 1);  // cudaMalloc(1 << 62), logged once although replayed
  std::remove(path.c_str());
}

// The quickstart's program: with an oom-step it survives a refused request of twice
// the device's memory, and leaves its first weight buffer allocated.
TEST(GpumemRun, ExampleTrainingLoopSurvivesItsOutOfMemoryAndLeaks) {
  std::string const path = "/tmp/gpumem-run-test-example-" + std::to_string(getpid()) + ".csv";
  auto const r = run_process(
      {gpumem_run(), "--log", path, "--report", "--", build_dir() + "/bin/training_loop", "3", "1"}, {});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("training_loop: step 1: a workspace of"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gpumem: out of memory on device 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("leaks: 1 allocation"), std::string::npos) << r.output;
  std::ifstream in{path};
  ASSERT_TRUE(in.good()) << path;
  int failed_allocs = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find(",allocate failure,") != std::string::npos) ++failed_allocs;
  }
  EXPECT_EQ(failed_allocs, 1);
  std::remove(path.c_str());
  std::remove((path + ".oom-1.json").c_str());
}

TEST(GpumemRun, ReportListsPeaksAndLeaks) {
  auto const r = run_process({gpumem_run(), "--report", "--", program("shim_rt_app"), "leak"}, {});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gpumem report"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("peak live"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("leaks: 2 allocations"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3 MiB  cudaMalloc"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gpumem::test
