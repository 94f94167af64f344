// CUDA IPC across a fork()ed child: the child really maps the parent's memory.

#include "sim_driver.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace gpumem::test {
namespace {

using IpcTest = SimDriverTest;

// Child-side checks, reported through the exit status (no gtest in the child).
int child_main(CUipcMemHandle handle, CUdeviceptr parent_ptr) {
  auto const& d = sim_driver::get();
  CUdeviceptr mine = 0;
  if (d.cuIpcOpenMemHandle(&mine, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS) return 10;
  if (mine == parent_ptr) return 11;  // a fresh mapping, not the inherited address
  if (std::strcmp(reinterpret_cast<char const*>(mine), "from parent") != 0) return 12;
  CUdeviceptr base = 0;
  std::size_t size = 0;
  if (d.cuMemGetAddressRange(&base, &size, mine + 3) != CUDA_SUCCESS || base != mine || size != 4096 - 256) return 13;
  std::strcpy(reinterpret_cast<char*>(mine), "from child");
  if (d.cuIpcCloseMemHandle(mine) != CUDA_SUCCESS) return 14;
  if (d.cuIpcCloseMemHandle(mine) != CUDA_ERROR_INVALID_VALUE) return 15;
  // The inherited heaps are the parent's: the child may not allocate from them.
  CUdeviceptr fresh = 0;
  if (d.cuMemAlloc(&fresh, 256) != CUDA_ERROR_NOT_INITIALIZED) return 16;
  return 0;
}

TEST_F(IpcTest, ChildProcessSharesTheAllocation) {
  CUdeviceptr p = alloc(4096);
  CUdeviceptr filler = alloc(4096);  // so the shared block does not start the heap
  ASSERT_EQ(drv.cuMemFree(p), CUDA_SUCCESS);
  CUdeviceptr shared = alloc(4096 - 256);
  std::strcpy(reinterpret_cast<char*>(shared), "from parent");
  CUipcMemHandle handle{};
  // A handle taken from an interior pointer names the allocation base.
  ASSERT_EQ(drv.cuIpcGetMemHandle(&handle, shared + 128), CUDA_SUCCESS);
  CUdeviceptr self = 0;
  EXPECT_EQ(drv.cuIpcOpenMemHandle(&self, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
  pid_t const pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(child_main(handle, shared));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_STREQ(reinterpret_cast<char const*>(shared), "from child");
  EXPECT_EQ(drv.cuMemFree(shared), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemFree(filler), CUDA_SUCCESS);
}

TEST_F(IpcTest, PoolAndManagedMemoryHaveNoLegacyHandle) {
  CUdeviceptr m = 0;
  ASSERT_EQ(drv.cuMemAllocManaged(&m, 256, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  CUipcMemHandle handle{};
  EXPECT_EQ(drv.cuIpcGetMemHandle(&handle, m), CUDA_ERROR_INVALID_VALUE);
  int host = 0;
  EXPECT_EQ(drv.cuIpcGetMemHandle(&handle, reinterpret_cast<CUdeviceptr>(&host)), CUDA_ERROR_INVALID_VALUE);
  std::memset(&handle, 0, sizeof handle);
  CUdeviceptr opened = 0;
  EXPECT_EQ(drv.cuIpcOpenMemHandle(&opened, handle, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemFree(m), CUDA_SUCCESS);
}

}  // namespace
}  // namespace gpumem::test
