// pinned_pool_memory_resource and per_flag_pools_memory_resource: size classes, reuse
// only after the GPU finished the copies issued before a free (the simulated device
// runs queued work late, only when something synchronizes), the cap, flag sets and
// CUDA's answers for pooled blocks.

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/error.hpp>
#include <gpumem/per_flag_pools_memory_resource.hpp>
#include <gpumem/pinned_host_memory_resource.hpp>
#include <gpumem/pinned_pool_memory_resource.hpp>
#include <gpumem/stream_tracker.hpp>

#include <support/sim_control.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace gpumem {
namespace {

using dtoh_async_fn = CUresult (*)(void*, CUdeviceptr, std::size_t, CUstream);
using host_get_flags_fn = CUresult (*)(unsigned*, void*);
using host_get_device_pointer_fn = CUresult (*)(CUdeviceptr*, void*, unsigned);

template <class F>
F driver_symbol(char const* name) {
  return reinterpret_cast<F>(dlsym(detail::driver().handle, name));
}

bool all_bytes(void const* p, std::size_t n, unsigned char v) {
  auto const* b = static_cast<unsigned char const*>(p);
  return std::all_of(b, b + n, [v](unsigned char x) { return x == v; });
}

class PinnedPool : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::driver_available()) GTEST_SKIP() << "no CUDA driver (simulated or real)";
    ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
    dtoh_async = driver_symbol<dtoh_async_fn>("cuMemcpyDtoHAsync_v2");
    ASSERT_NE(dtoh_async, nullptr);
    ASSERT_EQ(detail::driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    // Registered as the shim registers every stream: the fences' barriers order it.
    stream_tracker::of(detail::current_device()).stream_created(stream, CU_STREAM_NON_BLOCKING);
    ASSERT_EQ(detail::driver().cuMemAlloc(&device, bytes), CUDA_SUCCESS);
    ASSERT_EQ(detail::driver().cuMemsetD8(device, 0xDD, bytes), CUDA_SUCCESS);
    sim.reset_violations();
  }
  void TearDown() override {
    if (stream != nullptr) {
      EXPECT_EQ(detail::driver().cuStreamSynchronize(stream), CUDA_SUCCESS);
      stream_tracker::of(detail::current_device()).stream_destroying(stream);
      EXPECT_EQ(detail::driver().cuStreamDestroy(stream), CUDA_SUCCESS);
    }
    if (device != 0) { EXPECT_EQ(detail::driver().cuMemFree(device), CUDA_SUCCESS); }
    if (sim.present()) { EXPECT_EQ(sim.violations(), 0); }
  }
  // A copy of 0xDD bytes into `p`, queued on a non-blocking stream: on the sim it
  // runs only when something waits for it.
  void queue_copy_into(void* p) { ASSERT_EQ(dtoh_async(p, device, bytes, stream), CUDA_SUCCESS); }

  static constexpr std::size_t bytes = std::size_t{64} << 10;
  test::sim_control& sim = test::sim_control::get();
  dtoh_async_fn dtoh_async = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr device = 0;
};

TEST(PinnedPoolClasses, RoundToPagesThenFourClassesPerPowerOfTwo) {
  EXPECT_EQ(pinned_pool_memory_resource::class_size(1), 4096U);
  EXPECT_EQ(pinned_pool_memory_resource::class_size(4096), 4096U);
  EXPECT_EQ(pinned_pool_memory_resource::class_size(4097), 8192U);
  EXPECT_EQ(pinned_pool_memory_resource::class_size(4 * 4096), 4 * 4096U);
  EXPECT_EQ(pinned_pool_memory_resource::class_size(4 * 4096 + 1), 5 * 4096U);
  EXPECT_EQ(pinned_pool_memory_resource::class_size(std::size_t{1} << 20), std::size_t{1} << 20);
  EXPECT_EQ(pinned_pool_memory_resource::class_size((std::size_t{1} << 20) + 1), std::size_t{5} << 18);
  for (std::size_t n = 1; n < (std::size_t{64} << 20); n = n * 3 + 7) {
    std::size_t const c = pinned_pool_memory_resource::class_size(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c, std::max<std::size_t>(4096, n + n / 4 + 4096)) << n;
    EXPECT_EQ(c % 4096, 0U);
  }
}

TEST_F(PinnedPool, ABlockAQueuedCopyMayStillWriteIsNotHandedOutUntilTheCopyRan) {
  pinned_host_memory_resource host{0};
  pinned_pool_memory_resource pool{&host};
  void* first = pool.allocate(bytes);
  queue_copy_into(first);
  pool.deallocate(first, bytes);  // the program promises nothing about the copy
  void* second = pool.allocate(bytes);
  EXPECT_NE(second, first) << "reused while a copy may still write it";
  std::memset(second, 0x11, bytes);
  ASSERT_EQ(detail::driver().cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_TRUE(all_bytes(second, bytes, 0x11)) << "the late copy wrote into a live block";
  EXPECT_GE(pool.fence_count(), 1U);
  // Once the GPU ran everything queued (the simulated device runs work only when
  // something waits for it), the block is reused.
  ASSERT_EQ(detail::driver().cuCtxSynchronize(), CUDA_SUCCESS);
  void* third = pool.allocate(bytes);
  EXPECT_EQ(third, first);
  pool.deallocate(second, bytes);
  pool.deallocate(third, bytes);
}

// The same program without the rule: the late copy lands in the new owner's data.
// What the rule above prevents, shown to happen on the simulated device.
TEST_F(PinnedPool, WithoutWaitingForTheGpuTheLateCopyCorruptsTheNextOwner) {
  if (!sim.present()) GTEST_SKIP() << "a real GPU may have run the copy already";
  pinned_host_memory_resource host{0};
  pinned_pool_memory_resource pool{&host, pinned_pool_options{.wait_for_gpu = false}};
  void* first = pool.allocate(bytes);
  queue_copy_into(first);
  pool.deallocate(first, bytes);
  void* second = pool.allocate(bytes);
  ASSERT_EQ(second, first);
  std::memset(second, 0x11, bytes);
  ASSERT_EQ(detail::driver().cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_TRUE(all_bytes(second, bytes, 0xDD));
  pool.deallocate(second, bytes);
}

TEST_F(PinnedPool, AtItsCapThePoolWaitsForTheGpuInsteadOfGrowing) {
  pinned_host_memory_resource host{0};
  pinned_pool_memory_resource pool{&host, pinned_pool_options{.maximum_size = bytes}};
  void* first = pool.allocate(bytes);
  queue_copy_into(first);
  pool.deallocate(first, bytes);
  void* second = pool.allocate(bytes);
  EXPECT_EQ(second, first);
  EXPECT_EQ(pool.wait_count(), 1U);
  // The copy completed before the block came back.
  EXPECT_TRUE(all_bytes(second, bytes, 0xDD));
  EXPECT_THROW((void)pool.allocate(1), out_of_memory);
  pool.deallocate(second, bytes);
  EXPECT_EQ(pool.info().reserved_bytes, bytes);
  EXPECT_EQ(pool.release(), bytes);
  EXPECT_EQ(pool.info().reserved_bytes, 0U);
}

// A host loop that frees blocks whose copies the GPU has not run (the simulated
// device runs them only when something waits) would grow an uncapped pool without
// bound; past 64 MiB waiting beyond what is in use, requests wait for the GPU
// instead, and every copy has landed before its block comes back.
TEST_F(PinnedPool, AHostLoopNeverOutrunsTheGpuByMoreThanItsSlack) {
  if (!sim.present()) GTEST_SKIP() << "a real GPU runs the copies on its own";
  pinned_host_memory_resource host{0};
  pinned_pool_memory_resource pool{&host};
  constexpr std::size_t block = std::size_t{1} << 20;
  std::vector<void*> seen;
  for (int i = 0; i < 200; ++i) {
    void* p = pool.allocate(block);
    if (std::find(seen.begin(), seen.end(), p) != seen.end()) {
      ASSERT_TRUE(all_bytes(p, bytes, 0xDD)) << "reused before its copy ran";
    } else {
      seen.push_back(p);
    }
    std::memset(p, 0x11, block);
    queue_copy_into(p);
    pool.deallocate(p, block);
  }
  EXPECT_GE(pool.wait_count(), 1U);
  EXPECT_LE(pool.info().reserved_bytes, (std::size_t{64} << 20) + 2 * block);
  EXPECT_GT(pool.info().reserved_bytes, std::size_t{32} << 20) << "it waited before it had to";
}

TEST_F(PinnedPool, ClassesAreKeptApartAndBlocksCountedOnce) {
  pinned_host_memory_resource host{0};
  pinned_pool_memory_resource pool{&host, pinned_pool_options{.wait_for_gpu = false}};
  void* small = pool.allocate(100);
  pool.deallocate(small, 100);
  void* big = pool.allocate(std::size_t{1} << 20);
  EXPECT_NE(big, small);
  void* again = pool.allocate(4000);  // same class as 100
  EXPECT_EQ(again, small);
  auto const i = pool.info();
  EXPECT_EQ(i.used_bytes, (std::size_t{1} << 20) + 4096);
  EXPECT_EQ(i.reserved_bytes, i.used_bytes);
  EXPECT_TRUE(pool.owns(static_cast<char*>(big) + 12345));
  pool.deallocate(again, 4000);
  pool.deallocate(again, 4000);  // a second free is ignored
  EXPECT_EQ(pool.info().used_bytes, std::size_t{1} << 20);
  pool.deallocate(big, std::size_t{1} << 20);
}

TEST_F(PinnedPool, FlagSetsHaveTheirOwnPoolsAndCudaAnswersForPooledBlocks) {
  auto const get_flags = driver_symbol<host_get_flags_fn>("cuMemHostGetFlags");
  auto const get_device_pointer = driver_symbol<host_get_device_pointer_fn>("cuMemHostGetDevicePointer_v2");
  ASSERT_NE(get_flags, nullptr);
  ASSERT_NE(get_device_pointer, nullptr);
  per_flag_pools_memory_resource pools{host_accessible_kind::pinned, pinned_pool_options{.wait_for_gpu = false}};
  unsigned const mapped = CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE;
  void* plain = pools.allocate(5000);
  pools.deallocate(plain, 5000);
  void* m = nullptr;
  {
    scoped_alloc_flags flags{mapped};
    m = pools.allocate(5000);
  }
  EXPECT_NE(m, plain) << "a block of another flag set was reused";
  char* interior = static_cast<char*>(m) + 4500;
  unsigned flags = 0;
  ASSERT_EQ(get_flags(&flags, interior), CUDA_SUCCESS);
  EXPECT_EQ(flags, mapped);
  CUdeviceptr dptr = 0;
  ASSERT_EQ(get_device_pointer(&dptr, interior, 0), CUDA_SUCCESS);
  EXPECT_EQ(dptr, reinterpret_cast<CUdeviceptr>(interior));
  unsigned type = 0;
  ASSERT_EQ(detail::driver().cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                   reinterpret_cast<CUdeviceptr>(interior)),
            CUDA_SUCCESS);
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_HOST));
  void* again = pools.allocate(5000);  // flags 0 again: the first block
  EXPECT_EQ(again, plain);
  ASSERT_EQ(get_flags(&flags, again), CUDA_SUCCESS);
  EXPECT_EQ(flags, 0U);
  ASSERT_NE(pools.pool(mapped, 0), nullptr);
  EXPECT_TRUE(pools.owns(interior));
  {
    scoped_alloc_flags bad{0x40};
    try {
      (void)pools.allocate(10);
      ADD_FAILURE() << "unknown flags accepted";
    } catch (cuda_error const& e) { EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_VALUE); }
  }
  pools.deallocate(m, 5000);
  pools.deallocate(again, 5000);
  EXPECT_EQ(pools.info().used_bytes, 0U);
  EXPECT_GT(pools.release(), 0U);
  EXPECT_EQ(pools.info().reserved_bytes, 0U);
}

// A foreign pointer or a wrong size is the caller's bug: a release build ignores a
// foreign pointer and frees by the pointer alone; a debug build stops there
// (PinnedPoolDeathTest).
#ifdef NDEBUG
TEST_F(PinnedPool, ForeignFreesAreIgnoredAndSizesUnusedInReleaseBuilds) {
  pinned_host_memory_resource host{0};
  pinned_pool_memory_resource pool{&host, pinned_pool_options{.wait_for_gpu = false}};
  per_flag_pools_memory_resource pools{host_accessible_kind::pinned, pinned_pool_options{.wait_for_gpu = false}};
  void* a = pool.allocate(4096);
  int on_stack = 0;
  pool.deallocate(&on_stack, sizeof on_stack);
  pools.deallocate(&on_stack, sizeof on_stack);
  EXPECT_EQ(pool.info().used_bytes, 4096U);
  pool.deallocate(a, 1);  // another class's size: the block is freed all the same
  EXPECT_EQ(pool.info().used_bytes, 0U);
}
#else
TEST_F(PinnedPool, ForeignFreesAreIgnoredAndSizesUnusedInReleaseBuilds) {
  GTEST_SKIP() << "assertions are on (no NDEBUG): PinnedPoolDeathTest checks that they abort";
}
#endif

#ifndef NDEBUG
class PinnedPoolDeathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::driver_available()) GTEST_SKIP() << "no CUDA driver (simulated or real)";
    ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
};

TEST_F(PinnedPoolDeathTest, AForeignPointerAborts) {
  pinned_host_memory_resource host{0};
  pinned_pool_memory_resource pool{&host, pinned_pool_options{.wait_for_gpu = false}};
  per_flag_pools_memory_resource pools{host_accessible_kind::pinned, pinned_pool_options{.wait_for_gpu = false}};
  int on_stack = 0;
  EXPECT_DEATH(pool.deallocate(&on_stack, sizeof on_stack), "pinned pool: deallocate of a pointer the pool does");
  EXPECT_DEATH(pools.deallocate(&on_stack, sizeof on_stack), "per-flag pools: deallocate of a pointer no pool holds");
  // Once a device was reset, an unknown pointer may be one of its dead blocks: ignored.
  pools.forget_device(0);
  pools.deallocate(&on_stack, sizeof on_stack);
}

TEST_F(PinnedPoolDeathTest, AnotherSizeClassAborts) {
  pinned_host_memory_resource host{0};
  pinned_pool_memory_resource pool{&host, pinned_pool_options{.wait_for_gpu = false}};
  void* a = pool.allocate(100 * 1024);
  EXPECT_DEATH(pool.deallocate(a, 1), "pinned pool: deallocate with another size than the allocation's");
  pool.deallocate(a, 99 * 1024);  // a size of the same class: the allocation's
  EXPECT_EQ(pool.info().used_bytes, 0U);
}
#else
TEST(PinnedPoolDeathTest, ChecksNeedAssertions) { GTEST_SKIP() << "GPUMEM_ASSERT is compiled out (NDEBUG)"; }
#endif

TEST_F(PinnedPool, UnpooledEachCallReachesTheDriver) {
  if (!sim.present()) GTEST_SKIP() << "counts the simulated driver's calls";
  per_flag_pools_memory_resource pools{host_accessible_kind::pinned, {}, false};
  long const before = sim.call_count("cuMemHostAlloc");
  void* a = pools.allocate(100);
  pools.deallocate(a, 100);
  void* b = pools.allocate(100);
  pools.deallocate(b, 100);
  EXPECT_EQ(sim.call_count("cuMemHostAlloc"), before + 2);
}

// Managed memory through the same pools: one pool per attach flag, every block one
// whole cuMemAllocManaged allocation, and the same wait for the GPU before reuse
// (the host reads and writes managed memory directly).
TEST_F(PinnedPool, ManagedPoolsKeepAttachFlagsApartAndWaitForTheGpuBeforeReuse) {
  per_flag_pools_memory_resource pools{host_accessible_kind::managed};
  long const before = sim.present() ? sim.call_count("cuMemAllocManaged") : 0;
  void* global = nullptr;
  {
    scoped_alloc_flags with{CU_MEM_ATTACH_GLOBAL};
    global = pools.allocate(bytes);
  }
  unsigned is_managed = 0;
  CUdeviceptr base = 0;
  std::size_t size = 0;
  auto const dp = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(global));
  ASSERT_EQ(detail::driver().cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, dp), CUDA_SUCCESS);
  EXPECT_EQ(is_managed, 1U);
  ASSERT_EQ(detail::driver().cuMemGetAddressRange(&base, &size, dp), CUDA_SUCCESS);
  EXPECT_EQ(base, dp) << "a block is a whole allocation";
  EXPECT_EQ(size, pinned_pool_memory_resource::class_size(bytes));
  queue_copy_into(global);
  pools.deallocate(global, bytes);
  void* host_attached = nullptr;
  {
    scoped_alloc_flags with{CU_MEM_ATTACH_HOST};
    host_attached = pools.allocate(bytes);
  }
  EXPECT_NE(host_attached, global) << "another attach flag, another pool";
  void* again = pools.allocate(bytes);  // no flags: CU_MEM_ATTACH_GLOBAL
  EXPECT_NE(again, global) << "reused while a copy may still write it";
  std::memset(again, 0x11, bytes);
  ASSERT_EQ(detail::driver().cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_TRUE(all_bytes(again, bytes, 0x11)) << "the late copy wrote into a live block";
  ASSERT_EQ(detail::driver().cuCtxSynchronize(), CUDA_SUCCESS);
  void* third = pools.allocate(bytes);
  EXPECT_EQ(third, global) << "reused once the GPU ran the copy";
  if (sim.present()) { EXPECT_EQ(sim.call_count("cuMemAllocManaged"), before + 3); }
  {
    scoped_alloc_flags with{CU_MEMHOSTALLOC_WRITECOMBINED};  // a pinned flag: no attach flag
    EXPECT_THROW((void)pools.allocate(bytes), cuda_error);
  }
  for (void* p : {host_attached, again, third}) pools.deallocate(p, bytes);
}

TEST_F(PinnedPool, UnpooledManagedMemoryReachesTheDriverEachTime) {
  if (!sim.present()) GTEST_SKIP() << "counts the simulated driver's calls";
  per_flag_pools_memory_resource pools{host_accessible_kind::managed, {}, false};
  long const before = sim.call_count("cuMemAllocManaged");
  long const frees = sim.call_count("cuMemFree_v2");
  for (int i = 0; i < 3; ++i) pools.deallocate(pools.allocate(1000), 1000);
  EXPECT_EQ(sim.call_count("cuMemAllocManaged"), before + 3);
  EXPECT_EQ(sim.call_count("cuMemFree_v2"), frees + 3);
}

}  // namespace
}  // namespace gpumem
