// Environment configuration and GPUMEM_SIM_STRICT. The sim reads its environment
// once, so each case re-executes this binary with the variables set.

#include "sim_driver.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

// Runs this test binary again with one extra environment variable set and a
// filter selecting `test`; returns the exit status.
int rerun(char const* test, std::vector<std::string> const& env) {
  pid_t const pid = fork();
  if (pid == 0) {
    for (char const* name : {"GPUMEM_SIM_STRICT", "GPUMEM_SIM_DEVICES", "GPUMEM_SIM_DEVICE_MEMORY"}) unsetenv(name);
    for (auto const& kv : env) putenv(const_cast<char*>(kv.c_str()));
    setenv("GPUMEMSIM_CONFIG_CHILD", "1", 1);
    std::string const filter = std::string("--gtest_filter=") + test;
    char self[] = "/proc/self/exe";
    char* argv[] = {self, const_cast<char*>(filter.c_str()), nullptr};
    execv(self, argv);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool in_child() { return std::getenv("GPUMEMSIM_CONFIG_CHILD") != nullptr; }

TEST(SimConfig, EnvironmentSetsDeviceCountAndSize) {
  if (!in_child()) {
    EXPECT_EQ(rerun("SimConfig.EnvironmentSetsDeviceCountAndSize",
                    {"GPUMEM_SIM_DEVICES=3", "GPUMEM_SIM_DEVICE_MEMORY=64MiB"}),
              0);
    return;
  }
  auto const& drv = sim_driver::get();
  if (!sim_control::get().present()) GTEST_SKIP();
  ASSERT_EQ(drv.cuInit(0), CUDA_SUCCESS);
  int count = 0;
  ASSERT_EQ(drv.cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 3);
  std::size_t total = 0;
  ASSERT_EQ(drv.cuDeviceTotalMem(&total, 2), CUDA_SUCCESS);
  EXPECT_EQ(total, std::size_t{64} << 20);
}

TEST(SimConfig, PlainByteCountsAreAccepted) {
  if (!in_child()) {
    EXPECT_EQ(rerun("SimConfig.PlainByteCountsAreAccepted", {"GPUMEM_SIM_DEVICE_MEMORY=1048576"}), 0);
    return;
  }
  auto const& drv = sim_driver::get();
  if (!sim_control::get().present()) GTEST_SKIP();
  ASSERT_EQ(drv.cuInit(0), CUDA_SUCCESS);
  std::size_t total = 0;
  ASSERT_EQ(drv.cuDeviceTotalMem(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, std::size_t{1} << 20);
}

TEST(SimConfig, ADeviceTooLargeToMapHasNoMemoryInsteadOfAborting) {
  if (!in_child()) {
    // 2^63 bytes fits no host's address space; 2^64 - 1 would wrap when rounded up.
    for (char const* size : {"9223372036854775808", "18446744073709551615"}) {
      EXPECT_EQ(rerun("SimConfig.ADeviceTooLargeToMapHasNoMemoryInsteadOfAborting",
                      {std::string{"GPUMEM_SIM_DEVICE_MEMORY="} + size}),
                0)
          << size;
    }
    return;
  }
  auto const& drv = sim_driver::get();
  if (!sim_control::get().present()) GTEST_SKIP();
  ASSERT_EQ(drv.cuInit(0), CUDA_SUCCESS);
  std::size_t total = 1;
  ASSERT_EQ(drv.cuDeviceTotalMem(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, 0u);
  CUcontext ctx = nullptr;
  ASSERT_EQ(drv.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  std::size_t free = 1;
  ASSERT_EQ(drv.cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, 0u);
  CUdeviceptr p = 0;
  EXPECT_EQ(drv.cuMemAlloc(&p, 1 << 20), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(drv.cuMemAllocAsync(&p, 1 << 20, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(p, 0u);
}

TEST(SimConfig, StrictModeFailsAProcessWithViolations) {
  if (!sim_control::get().present()) GTEST_SKIP() << "needs the simulated device";
  if (in_child()) {
    // Exits normally; the sim's exit-time check must turn this into 86.
    auto const& drv = sim_driver::get();
    drv.cuInit(0);
    CUcontext ctx = nullptr;
    drv.cuDevicePrimaryCtxRetain(&ctx, 0);
    drv.cuCtxSetCurrent(ctx);
    int host = 0;
    drv.cuMemFree(reinterpret_cast<CUdeviceptr>(&host));
    std::exit(std::getenv("GPUMEM_SIM_STRICT") != nullptr ? 0 : 3);
  }
  EXPECT_EQ(rerun("SimConfig.StrictModeFailsAProcessWithViolations", {"GPUMEM_SIM_STRICT=1"}), 86);
  EXPECT_EQ(rerun("SimConfig.StrictModeFailsAProcessWithViolations", {}), 3);  // not strict: normal exit
}

}  // namespace
}  // namespace gpumem::test
