// Device memory of the simulated driver: accounting, edge cases, strictness.

#include "sim_driver.hpp"

#include <cstring>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

using MemoryTest = SimDriverTest;

TEST_F(MemoryTest, FreeAndTotalFollowTheAllocatorExactly) {
  std::size_t free0 = 0, total = 0;
  ASSERT_EQ(drv.cuMemGetInfo(&free0, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, std::size_t{1} << 30);  // GPUMEM_SIM_DEVICE_MEMORY default
  EXPECT_EQ(free0, total);
  CUdeviceptr a = alloc(1000);  // rounded to 256-byte granules: 1024
  CUdeviceptr b = alloc(MiB);
  std::size_t free1 = 0;
  ASSERT_EQ(drv.cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free0 - free1, 1024 + MiB);
  EXPECT_EQ(sim.live_bytes(0), 1024 + MiB);
  EXPECT_EQ(sim.live_allocations(0), 2U);
  EXPECT_EQ(a % 256, 0U);
  EXPECT_EQ(b % 256, 0U);
  ASSERT_EQ(drv.cuMemFree(a), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemFree(b), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free1, free0);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(MemoryTest, OutOfMemoryAtTheConfiguredSizeAndCoalescingAfterFree) {
  sim.set_device_memory(0, 4 * MiB);
  std::size_t free_bytes = 0, total = 0;
  ASSERT_EQ(drv.cuMemGetInfo(&free_bytes, &total), CUDA_SUCCESS);
  ASSERT_EQ(total, 4 * MiB);
  CUdeviceptr p[4] = {};
  for (auto& q : p) q = alloc(MiB);
  CUdeviceptr extra = 0;
  EXPECT_EQ(drv.cuMemAlloc(&extra, 256), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(drv.cuMemGetInfo(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes, 0U);
  // Free two neighbours: only their coalesced range fits a 2 MiB block.
  ASSERT_EQ(drv.cuMemFree(p[1]), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemFree(p[2]), CUDA_SUCCESS);
  CUdeviceptr big = 0;
  ASSERT_EQ(drv.cuMemAlloc(&big, 2 * MiB), CUDA_SUCCESS);
  EXPECT_EQ(big, std::min(p[1], p[2]));
  EXPECT_EQ(drv.cuMemAlloc(&extra, 1), CUDA_ERROR_OUT_OF_MEMORY);
  for (CUdeviceptr q : {p[0], p[3], big}) EXPECT_EQ(drv.cuMemFree(q), CUDA_SUCCESS);
  sim.set_device_memory(0, std::size_t{1} << 30);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(MemoryTest, EdgeCaseResults) {
  CUdeviceptr p = 0;
  EXPECT_EQ(drv.cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemAlloc(nullptr, 256), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemAlloc(&p, ~std::size_t{0}), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(drv.cuMemAlloc(&p, (std::size_t{1} << 30) + 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(drv.cuMemFree(0), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemFreeAsync(0, nullptr), CUDA_SUCCESS);
  p = 1;
  EXPECT_EQ(drv.cuMemAllocAsync(&p, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(p, 0U);
  std::size_t total = 0;
  EXPECT_EQ(drv.cuMemGetInfo(nullptr, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, std::size_t{1} << 30);
  EXPECT_EQ(drv.cuMemAllocManaged(&p, 256, 0), CUDA_ERROR_INVALID_VALUE);  // flags must be GLOBAL or HOST
  std::size_t pitch = 0;
  EXPECT_EQ(drv.cuMemAllocPitch(&p, &pitch, 100, 10, 3), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemAllocPitch(&p, &pitch, 0, 10, 4), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(drv.cuMemAllocPitch(&p, &pitch, 100, 10, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 512U);
  EXPECT_EQ(sim.live_bytes(0), 5120U);
  EXPECT_EQ(drv.cuMemFree(p), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 0);  // bad arguments are errors, not violations
}

TEST_F(MemoryTest, BadFreesAreViolationsWithInvalidValue) {
  CUdeviceptr p = alloc(4096);
  EXPECT_EQ(drv.cuMemFree(p + 256), CUDA_ERROR_INVALID_VALUE);  // interior
  EXPECT_EQ(sim.violations(), 1);
  int host = 0;
  EXPECT_EQ(drv.cuMemFree(reinterpret_cast<CUdeviceptr>(&host)), CUDA_ERROR_INVALID_VALUE);  // unknown
  EXPECT_EQ(sim.violations(), 2);
  ASSERT_EQ(drv.cuMemFree(p), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemFree(p), CUDA_ERROR_INVALID_VALUE);  // double
  EXPECT_EQ(sim.violations(), 3);
  CUdeviceptr q = alloc(256);
  ASSERT_EQ(drv.cuMemFreeAsync(q, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemFreeAsync(q, nullptr), CUDA_ERROR_INVALID_VALUE);  // async double free, still queued
  EXPECT_EQ(drv.cuMemFree(q), CUDA_ERROR_INVALID_VALUE);                // sync free runs the queued one first: double
  EXPECT_EQ(drv.cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(&host), nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(sim.violations(), 6);
}

TEST_F(MemoryTest, TwoDevicesHaveDistinctMemoryAndAccounting) {
  int count = 0;
  ASSERT_EQ(drv.cuDeviceGetCount(&count), CUDA_SUCCESS);
  ASSERT_EQ(count, 2);
  CUdeviceptr on0 = alloc(MiB);
  CUcontext ctx1 = nullptr;
  ASSERT_EQ(drv.cuDevicePrimaryCtxRetain(&ctx1, 1), CUDA_SUCCESS);
  ASSERT_NE(ctx1, ctx);
  ASSERT_EQ(drv.cuCtxSetCurrent(ctx1), CUDA_SUCCESS);
  CUdeviceptr on1 = alloc(MiB);
  EXPECT_EQ(sim.live_bytes(0), MiB);
  EXPECT_EQ(sim.live_bytes(1), MiB);
  EXPECT_TRUE(on1 + MiB <= on0 || on0 + MiB <= on1);
  int ordinal = -1;
  ASSERT_EQ(drv.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, on0), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 0);
  ASSERT_EQ(drv.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, on1), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);
  CUdevice dev = -1;
  ASSERT_EQ(drv.cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  // Host code can use device memory directly.
  std::memset(reinterpret_cast<void*>(on1), 0x5a, 64);
  unsigned char back[64] = {};
  ASSERT_EQ(drv.cuMemcpyDtoH(back, on1, sizeof back), CUDA_SUCCESS);
  EXPECT_EQ(back[63], 0x5a);
  // Freeing device 0's pointer while device 1 is current works (unified addressing).
  EXPECT_EQ(drv.cuMemFree(on0), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemFree(on1), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(MemoryTest, PointerQueriesDescribeTheAllocation) {
  CUdeviceptr p = alloc(3000);
  CUdeviceptr base = 0;
  std::size_t size = 0;
  ASSERT_EQ(drv.cuMemGetAddressRange(&base, &size, p + 100), CUDA_SUCCESS);
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, 3000U);
  int host = 0;
  EXPECT_EQ(drv.cuMemGetAddressRange(&base, &size, reinterpret_cast<CUdeviceptr>(&host)), CUDA_ERROR_NOT_FOUND);
  unsigned type = 0;
  ASSERT_EQ(drv.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 5), CUDA_SUCCESS);
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  CUcontext owner = nullptr;
  ASSERT_EQ(drv.cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p), CUDA_SUCCESS);
  EXPECT_EQ(owner, ctx);
  EXPECT_EQ(drv.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(&host)),
            CUDA_ERROR_INVALID_VALUE);
  // The plural form does not fail on host memory: it reports zeros.
  unsigned managed = 7;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void* data[] = {&type, &managed};
  ASSERT_EQ(drv.cuPointerGetAttributes(2, attrs, data, reinterpret_cast<CUdeviceptr>(&host)), CUDA_SUCCESS);
  EXPECT_EQ(type, 0U);
  EXPECT_EQ(managed, 0U);

  CUdeviceptr m = 0;
  ASSERT_EQ(drv.cuMemAllocManaged(&m, 512, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m), CUDA_SUCCESS);
  EXPECT_EQ(managed, 1U);
  ASSERT_EQ(drv.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p), CUDA_SUCCESS);
  EXPECT_EQ(managed, 0U);
  EXPECT_EQ(sim.live_bytes(0), 3072U + 512U);  // managed memory is device accounting too
  EXPECT_EQ(drv.cuMemFree(m), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemFree(p), CUDA_SUCCESS);
}

TEST_F(MemoryTest, MemsetAndCopiesMoveBytes) {
  CUdeviceptr a = alloc(1024);
  CUdeviceptr b = alloc(1024);
  ASSERT_EQ(drv.cuMemsetD32(a, 0x01020304U, 256), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemcpyDtoD(b, a, 1024), CUDA_SUCCESS);
  unsigned words[256] = {};
  ASSERT_EQ(drv.cuMemcpyDtoH(words, b, sizeof words), CUDA_SUCCESS);
  EXPECT_EQ(words[0], 0x01020304U);
  EXPECT_EQ(words[255], 0x01020304U);
  EXPECT_EQ(drv.cuMemsetD32(a + 2, 0, 4), CUDA_ERROR_INVALID_VALUE);      // misaligned
  EXPECT_EQ(drv.cuMemsetD8(a + 1000, 0, 100), CUDA_ERROR_INVALID_VALUE);  // past the end
  char const text[] = "gpumem";
  ASSERT_EQ(drv.cuMemcpyHtoD(a, text, sizeof text), CUDA_SUCCESS);
  EXPECT_STREQ(reinterpret_cast<char const*>(a), "gpumem");
  EXPECT_EQ(drv.cuMemFree(a), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemFree(b), CUDA_SUCCESS);
}

TEST_F(MemoryTest, PoolsAccountStreamOrderedMemory) {
  CUmemoryPool def = nullptr;
  ASSERT_EQ(drv.cuDeviceGetDefaultMemPool(&def, 0), CUDA_SUCCESS);
  CUmemoryPool current = nullptr;
  ASSERT_EQ(drv.cuDeviceGetMemPool(&current, 0), CUDA_SUCCESS);
  EXPECT_EQ(current, def);
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(drv.cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  cuuint64_t threshold = 1 << 20;
  ASSERT_EQ(drv.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
  threshold = 0;
  ASSERT_EQ(drv.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
  EXPECT_EQ(threshold, 1U << 20);
  CUdeviceptr p = 0;
  ASSERT_EQ(drv.cuMemAllocFromPoolAsync(&p, 1000, pool, nullptr), CUDA_SUCCESS);
  cuuint64_t used = 0;
  ASSERT_EQ(drv.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used), CUDA_SUCCESS);
  EXPECT_EQ(used, 1024U);
  CUmemoryPool owner = nullptr;
  ASSERT_EQ(drv.cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p), CUDA_SUCCESS);
  EXPECT_EQ(owner, pool);
  ASSERT_EQ(drv.cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used), CUDA_SUCCESS);
  EXPECT_EQ(used, 0U);
  ASSERT_EQ(drv.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &used), CUDA_SUCCESS);
  EXPECT_EQ(used, 1024U);
  EXPECT_EQ(drv.cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);  // the default pool stays
  ASSERT_EQ(drv.cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemPoolTrimTo(pool, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(sim.violations(), 1);  // use of the destroyed pool
}

TEST_F(MemoryTest, CallsNeedAContext) {
  ASSERT_EQ(drv.cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  std::size_t f = 0, t = 0;
  EXPECT_EQ(drv.cuMemAlloc(&p, 256), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(drv.cuMemGetInfo(&f, &t), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(drv.cuMemFree(0), CUDA_SUCCESS);  // even without a context
  CUstream s = nullptr;
  EXPECT_EQ(drv.cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(drv.cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(drv.cuCtxPushCurrent(ctx), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemGetInfo(&f, &t), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, ctx);
  EXPECT_EQ(drv.cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(MemoryTest, EightThreadsHammerAllocAndFree) {
  constexpr int threads = 8;
  constexpr int rounds = 2000;
  std::vector<std::thread> pool;
  std::vector<int> failures(threads, 0);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto const& d = sim_driver::get();
      if (d.cuCtxSetCurrent(ctx) != CUDA_SUCCESS) ++failures[t];
      CUstream s = nullptr;
      if (d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) ++failures[t];
      std::vector<CUdeviceptr> held;
      for (int i = 0; i < rounds; ++i) {
        CUdeviceptr p = 0;
        std::size_t const bytes = 256 * static_cast<std::size_t>(1 + (i * 7 + t) % 64);
        bool const async = i % 2 == 0;
        CUresult r = async ? d.cuMemAllocAsync(&p, bytes, s) : d.cuMemAlloc(&p, bytes);
        if (r != CUDA_SUCCESS) {
          ++failures[t];
          continue;
        }
        std::memset(reinterpret_cast<void*>(p), t, bytes);  // overlapping blocks would clobber
        held.push_back(p);
        if (held.size() > 16) {
          CUdeviceptr victim = held.front();
          held.erase(held.begin());
          if (*reinterpret_cast<unsigned char*>(victim) != t) ++failures[t];
          r = async ? d.cuMemFreeAsync(victim, s) : d.cuMemFree(victim);
          if (r != CUDA_SUCCESS) ++failures[t];
        }
      }
      for (CUdeviceptr p : held) {
        if (d.cuMemFreeAsync(p, s) != CUDA_SUCCESS) ++failures[t];
      }
      if (d.cuStreamSynchronize(s) != CUDA_SUCCESS || d.cuStreamDestroy(s) != CUDA_SUCCESS) ++failures[t];
    });
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
  EXPECT_EQ(sim.live_allocations(0), 0U);
  EXPECT_EQ(sim.violations(), 0);
}

}  // namespace
}  // namespace gpumem::test
