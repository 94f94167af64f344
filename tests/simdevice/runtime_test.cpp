// The libcudart.so.13 stand-in, reached the way applications reach NVIDIA's: this
// binary links the toolkit's libcudart.so (soname libcudart.so.13) and the test
// environment's library path resolves that soname to the sim.

#include "support/sim_control.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

std::string loaded_from(void const* symbol) {
  Dl_info info{};
  return dladdr(symbol, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "";
}

// Undefined dynamic symbols of an ELF shared object whose names start with "cu"
// and an upper-case letter: driver functions it would bind directly.
std::vector<std::string> undefined_driver_symbols(std::string const& path) {
  std::vector<std::string> out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {"<cannot open " + path + ">"};
  struct stat st {};
  fstat(fd, &st);
  void* map = mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return {"<cannot map>"};
  auto const* base = static_cast<unsigned char const*>(map);
  auto const* eh = reinterpret_cast<Elf64_Ehdr const*>(base);
  auto const* sh = reinterpret_cast<Elf64_Shdr const*>(base + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_DYNSYM) continue;
    auto const* syms = reinterpret_cast<Elf64_Sym const*>(base + sh[i].sh_offset);
    auto const* names = reinterpret_cast<char const*>(base + sh[sh[i].sh_link].sh_offset);
    for (std::size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k) {
      char const* name = names + syms[k].st_name;
      if (syms[k].st_shndx == SHN_UNDEF && name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z')
        out.emplace_back(name);
    }
  }
  munmap(map, static_cast<std::size_t>(st.st_size));
  return out;
}

class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // initialises the runtime and context
    if (!sim.present()) GTEST_SKIP() << "needs the simulated device";
    sim.reset_violations();
  }
  void TearDown() override {
    if (!sim.present()) return;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(sim.live_allocations(0), 0U);
    EXPECT_EQ(sim.live_allocations(1), 0U);
  }
  sim_control& sim = sim_control::get();
};

TEST_F(RuntimeTest, TheSimulatedRuntimeAndDriverAreWhatLoaded) {
  std::string const rt = loaded_from(reinterpret_cast<void const*>(&cudaMalloc));
  EXPECT_NE(rt.find("/simdevice/libcudart.so.13"), std::string::npos) << rt;
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(cuda, nullptr);
  std::string const drv = loaded_from(dlsym(cuda, "cuInit"));
  EXPECT_NE(drv.find("/simdevice/libcuda.so.1"), std::string::npos) << drv;
  int version = 0;
  ASSERT_EQ(cudaRuntimeGetVersion(&version), cudaSuccess);
  EXPECT_EQ(version, 13000);
  ASSERT_EQ(cudaDriverGetVersion(&version), cudaSuccess);
  EXPECT_EQ(version, 13000);
}

TEST_F(RuntimeTest, RuntimeReachesTheDriverOnlyThroughCuGetProcAddress) {
  // No direct bindings to driver symbols in the runtime library...
  std::string const rt = loaded_from(reinterpret_cast<void const*>(&cudaMalloc));
  EXPECT_EQ(undefined_driver_symbols(rt), std::vector<std::string>{});
  // ...its table came from cuGetProcAddress_v2, and its calls land in the driver.
  EXPECT_GE(sim.call_count("cuGetProcAddress_v2"), 40);
  long const allocs = sim.call_count("cuMemAlloc_v2");
  long const frees = sim.call_count("cuMemFree_v2");
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(sim.call_count("cuMemAlloc_v2"), allocs + 1);
  EXPECT_EQ(sim.call_count("cuMemFree_v2"), frees + 1);
}

TEST_F(RuntimeTest, MallocSemanticsAndLastError) {
  long const allocs = sim.call_count("cuMemAlloc_v2");
  void* p = reinterpret_cast<void*>(0x1);
  ASSERT_EQ(cudaMalloc(&p, 0), cudaSuccess);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(sim.call_count("cuMemAlloc_v2"), allocs);  // size 0 never reaches the driver
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&p, std::size_t{1} << 40), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
  int host = 0;
  EXPECT_EQ(cudaFree(&host), cudaErrorInvalidValue);
  EXPECT_EQ(sim.violations(), 1);  // the bogus free
  EXPECT_STREQ(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
  p = reinterpret_cast<void*>(0x1);
  ASSERT_EQ(cudaMallocManaged(&p, 0, cudaMemAttachGlobal), cudaSuccess);  // measured
  EXPECT_EQ(p, nullptr);
  std::size_t total = 0;
  EXPECT_EQ(cudaMemGetInfo(nullptr, &total), cudaSuccess);
}

TEST_F(RuntimeTest, MemGetInfoMatchesTheDevice) {
  std::size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  EXPECT_EQ(total, std::size_t{1} << 30);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  std::size_t free1 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free0 - free1, std::size_t{1} << 20);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(RuntimeTest, SetDeviceSelectsWhereMemoryLives) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_EQ(count, 2);
  EXPECT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
  cudaGetLastError();
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  int dev = -1;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(dev, 1);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.device, 1);
  EXPECT_EQ(attr.devicePointer, p);
  EXPECT_EQ(sim.live_bytes(1), 4096U);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  int host = 0;
  ASSERT_EQ(cudaPointerGetAttributes(&attr, &host), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered);
  ASSERT_EQ(cudaMallocManaged(&p, 256, cudaMemAttachGlobal), cudaSuccess);
  ASSERT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeManaged);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 1), cudaSuccess);
  EXPECT_EQ(prop.major, 9);
  EXPECT_EQ(prop.minor, 0);
  EXPECT_EQ(prop.totalGlobalMem, std::size_t{1} << 30);
  EXPECT_EQ(prop.memoryPoolsSupported, 1);
  EXPECT_STREQ(prop.name, "gpumem simulated device 1");
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

void bump(void* p) { ++*static_cast<int*>(p); }

TEST_F(RuntimeTest, StreamsEventsAndStreamOrderedMemory) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocAsync(&p, 2048, s), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(p, 0x7f, 2048, s), cudaSuccess);
  int runs = 0;
  ASSERT_EQ(cudaLaunchHostFunc(s, bump, &runs), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not-ready is not an error
  EXPECT_EQ(sim.live_allocations(0), 1U);
  ASSERT_EQ(cudaEventSynchronize(e), cudaSuccess);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(*static_cast<unsigned char*>(p), 0x7f);  // still allocated: the free is after the event
  EXPECT_EQ(sim.live_allocations(0), 1U);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(sim.live_allocations(0), 0U);
  ASSERT_EQ(cudaFreeAsync(nullptr, s), cudaSuccess);
  ASSERT_EQ(cudaEventDestroy(e), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

extern "C" cudaError_t cudaMallocAsync_ptsz(void**, size_t, cudaStream_t);
extern "C" cudaError_t cudaFreeAsync_ptsz(void*, cudaStream_t);
extern "C" cudaError_t cudaStreamQuery_ptsz(cudaStream_t);

TEST_F(RuntimeTest, PerThreadExportsUseThePerThreadStream) {
  void* p = nullptr;
  ASSERT_EQ(cudaMallocAsync_ptsz(&p, 512, nullptr), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync_ptsz(p, nullptr), cudaSuccess);  // queued on this thread's stream
  EXPECT_EQ(cudaStreamQuery(cudaStreamPerThread), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaSuccess);  // the legacy stream has nothing
  EXPECT_EQ(sim.live_allocations(0), 1U);
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery_ptsz(nullptr), cudaSuccess);
  EXPECT_EQ(sim.live_allocations(0), 0U);
}

TEST_F(RuntimeTest, MemcpyAndMemset) {
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 3, 64), cudaSuccess);
  unsigned char back[64] = {};
  ASSERT_EQ(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back[0], 3);
  EXPECT_EQ(back[63], 3);
  EXPECT_EQ(cudaMemcpy(back, d, sizeof back, static_cast<cudaMemcpyKind>(9)), cudaErrorInvalidMemcpyDirection);
  cudaGetLastError();
  ASSERT_EQ(cudaFree(d), cudaSuccess);
}

TEST_F(RuntimeTest, CaptureRulesThroughTheRuntime) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureStatus status{};
  ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&p, 256, s), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(cudaGraphDestroy(g), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
  cudaGetLastError();
  EXPECT_EQ(sim.violations(), 1);
}

TEST_F(RuntimeTest, DeviceResetDestroysAllocationsAndPools) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  cudaMemPool_t pool = nullptr;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  void* q = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&q, 4096, pool, nullptr), cudaSuccess);
  std::uint64_t used = 0;
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used), cudaSuccess);
  EXPECT_EQ(used, 4096U);
  EXPECT_EQ(sim.live_allocations(0), 2U);
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(sim.live_allocations(0), 0U);
  EXPECT_EQ(cudaMemPoolTrimTo(pool, 0), cudaErrorInvalidValue);  // the pool went with the reset
  cudaGetLastError();
  EXPECT_EQ(sim.violations(), 1);  // using its handle afterwards
  sim.reset_violations();
  // The runtime keeps working after a reset.
  ASSERT_EQ(cudaMalloc(&p, 256), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  cudaMemPool_t def = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&def, 0), cudaSuccess);
  EXPECT_NE(def, nullptr);
  EXPECT_EQ(cudaMemPoolTrimTo(def, 0), cudaSuccess);
}

TEST_F(RuntimeTest, DriverEntryPointsForwardToCuGetProcAddress) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(cuda, nullptr);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 13000, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSuccess);
  EXPECT_EQ(fn, dlsym(cuda, "cuMemAlloc_v2"));
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemFreeAsync", &fn, 13000, cudaEnablePerThreadDefaultStream, &status),
            cudaSuccess);
  EXPECT_EQ(fn, dlsym(cuda, "cuMemFreeAsync_ptsz"));
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuNoSuchThing", &fn, 13000, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(fn, nullptr);
}

TEST_F(RuntimeTest, IpcHandleOfOwnProcessCannotBeOpenedHere) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  cudaIpcMemHandle_t h{};
  ASSERT_EQ(cudaIpcGetMemHandle(&h, p), cudaSuccess);
  void* opened = nullptr;
  EXPECT_NE(cudaIpcOpenMemHandle(&opened, h, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  cudaGetLastError();
  ASSERT_EQ(cudaFree(p), cudaSuccess);
}

}  // namespace
}  // namespace gpumem::test
