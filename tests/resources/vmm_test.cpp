// vmm_memory_resource against the driver (the simulated device's virtual memory
// management, or a real GPU): placement one after another, extends(), copies
// across the seam, a freed end mapped again in place, errors, peers, teardown,
// and the cuMemAlloc fallback on a device without virtual memory management.

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/real_dlsym.hpp>
#include <gpumem/error.hpp>
#include <gpumem/pool_memory_resource.hpp>
#include <gpumem/vmm_memory_resource.hpp>

#include <support/device_helpers.hpp>
#include <support/sim_control.hpp>

#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace gpumem {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

char* as_char(void* p) { return static_cast<char*>(p); }

bool vmm_disabled() { return std::getenv("GPUMEM_SIM_NO_VMM") != nullptr; }

class Vmm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::driver_available()) GTEST_SKIP() << "no CUDA driver (simulated or real)";
    if (vmm_disabled()) GTEST_SKIP() << "virtual memory management switched off";
    ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
    granularity = mr.contiguous_granularity();
    if (granularity == 0) GTEST_SKIP() << "this device has no virtual memory management";
  }
  test::sim_control& sim = test::sim_control::get();
  vmm_memory_resource mr;
  std::size_t granularity = 0;
};

TEST_F(Vmm, AllocationsFollowEachOtherAndServeAsOneBuffer) {
  if (sim.present()) { EXPECT_EQ(granularity, 2 * MiB); }
  auto const creates = sim.call_count("cuMemCreate");
  void* a = mr.allocate(granularity + 1);  // rounded up to two granules
  void* b = mr.allocate(granularity);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(as_char(b), as_char(a) + 2 * granularity);
  EXPECT_TRUE(mr.extends(as_char(a) + 2 * granularity, b));
  EXPECT_FALSE(mr.extends(as_char(a) + granularity, b));  // not where a ends
  EXPECT_FALSE(mr.extends(b, a));
  EXPECT_EQ(mr.info().reserved_bytes, 3 * granularity);
  EXPECT_EQ(mr.info().used_bytes, 3 * granularity);
  // One memset and one copy across both mappings.
  EXPECT_TRUE(test::fill_and_check(a, 3 * granularity, 0x5a));
  // One physical allocation per granule, so that any of them can be given back.
  if (sim.present()) { EXPECT_EQ(sim.call_count("cuMemCreate"), creates + 3); }
  mr.deallocate(b, granularity);
  mr.deallocate(a, granularity + 1);
  EXPECT_EQ(mr.info().reserved_bytes, 0U);
  EXPECT_EQ(mr.fallback_allocations(), 0U);
}

// decommit() gives the device memory of whole granules back while the addresses
// stay allocated, across the seam of two allocations that follow each other too;
// commit() maps fresh memory there; a free unmaps only what is still mapped.
TEST_F(Vmm, PagesGoBackAndComeBackInsideAllocations) {
  void* a = mr.allocate(3 * granularity);
  void* b = mr.allocate(2 * granularity);
  ASSERT_EQ(as_char(b), as_char(a) + 3 * granularity);
  std::size_t const device_before = sim.present() ? sim.live_bytes(0) : 0;
  ASSERT_TRUE(test::fill_and_check(a, 5 * granularity, 0x11));

  // a's last two granules and b's first: one range over the seam.
  char* const mid = as_char(a) + granularity;
  ASSERT_TRUE(mr.decommit(mid, 3 * granularity));
  EXPECT_EQ(mr.info().reserved_bytes, 2 * granularity);
  if (sim.present()) { EXPECT_EQ(sim.live_bytes(0), device_before - 3 * granularity); }
  EXPECT_TRUE(test::fill_and_check(a, granularity, 0x22));  // the rest is untouched and usable
  EXPECT_TRUE(test::fill_and_check(as_char(b) + granularity, granularity, 0x33));

  // Refused, changing nothing: twice, not whole granules, not ours.
  EXPECT_FALSE(mr.decommit(mid, granularity));
  EXPECT_FALSE(mr.decommit(a, granularity / 2));
  EXPECT_FALSE(mr.decommit(as_char(a) + 256, granularity));
  int host = 0;
  EXPECT_FALSE(mr.decommit(&host, granularity));
  EXPECT_THROW(mr.commit(a, granularity), logic_error);  // still mapped

  mr.commit(mid, 3 * granularity);
  EXPECT_EQ(mr.info().reserved_bytes, 5 * granularity);
  EXPECT_TRUE(test::fill_and_check(a, 5 * granularity, 0x44));

  ASSERT_TRUE(mr.decommit(as_char(b) + granularity, granularity));
  mr.deallocate(b, 2 * granularity);  // one granule mapped, one released
  mr.deallocate(a, 3 * granularity);
  EXPECT_EQ(mr.info().reserved_bytes, 0U);
  if (sim.present()) {
    EXPECT_EQ(sim.live_bytes(0), device_before - 5 * granularity);
    EXPECT_EQ(sim.violations(), 0);
  }
}

// Between begin_page_moves() and the last end_page_moves(), decommitted memory stays
// with the resource, outside info(), and the next maps take it before creating any;
// what is left goes back to the device at the end.
TEST_F(Vmm, PageMovesMapTheMemoryTheyUnmapAgain) {
  if (!sim.present()) GTEST_SKIP() << "counts the simulated device's memory and calls";
  void* a = mr.allocate(4 * granularity);
  std::size_t const device_before = sim.live_bytes(0);
  ASSERT_TRUE(test::fill_and_check(a, 4 * granularity, 0x17));
  mr.begin_page_moves();
  mr.begin_page_moves();  // they nest
  ASSERT_TRUE(mr.decommit(as_char(a) + granularity, 3 * granularity));
  EXPECT_EQ(mr.info().reserved_bytes, granularity);
  EXPECT_EQ(sim.live_bytes(0), device_before);  // kept
  auto const creates = sim.call_count("cuMemCreate");
  void* b = mr.allocate(2 * granularity);  // two kept pages, mapped elsewhere
  EXPECT_EQ(sim.call_count("cuMemCreate"), creates);
  EXPECT_EQ(sim.live_bytes(0), device_before);
  EXPECT_TRUE(test::fill_and_check(b, 2 * granularity, 0x28));
  EXPECT_TRUE(test::check(a, granularity, 0x17));
  mr.end_page_moves();
  EXPECT_EQ(sim.live_bytes(0), device_before);  // the inner end returns nothing
  mr.end_page_moves();
  EXPECT_EQ(sim.live_bytes(0), device_before - granularity);  // the page left over went back
  EXPECT_EQ(mr.info().reserved_bytes, 3 * granularity);
  mr.commit(as_char(a) + granularity, 3 * granularity);  // outside moves: new memory
  EXPECT_EQ(sim.call_count("cuMemCreate"), creates + 3);
  EXPECT_TRUE(test::fill_and_check(a, 4 * granularity, 0x39));
  // Outside moves a decommit gives the memory back at once.
  ASSERT_TRUE(mr.decommit(b, granularity));
  EXPECT_EQ(sim.live_bytes(0), device_before + granularity);
  mr.deallocate(b, 2 * granularity);
  mr.deallocate(a, 4 * granularity);
  EXPECT_EQ(sim.live_bytes(0), device_before - 4 * granularity);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(Vmm, AFreedEndIsMappedAgainInPlace) {
  void* a = mr.allocate(granularity);
  void* b = mr.allocate(granularity);
  mr.deallocate(b, granularity);
  void* c = mr.allocate(3 * granularity);  // continues a where b was
  EXPECT_EQ(c, b);
  EXPECT_TRUE(mr.extends(as_char(a) + granularity, c));
  EXPECT_TRUE(test::fill_and_check(a, 4 * granularity, 0x3c));
  mr.deallocate(c, 3 * granularity);
  mr.deallocate(a, granularity);
  EXPECT_EQ(mr.info().reserved_bytes, 0U);
}

TEST_F(Vmm, MoreThanTheDeviceHoldsIsOutOfMemoryAndChangesNothing) {
  auto const total = test::device_total_memory();
  ASSERT_GT(total, 0U);
  void* a = mr.allocate(granularity);
  auto const creates = sim.call_count("cuMemCreate");
  EXPECT_THROW(static_cast<void>(mr.allocate(total + granularity)), out_of_memory);
  // Refused before any page was mapped (a GPU would spend seconds mapping its whole
  // memory page by page first).
  EXPECT_EQ(sim.call_count("cuMemCreate"), creates);
  EXPECT_EQ(mr.info().reserved_bytes, granularity);
  void* b = mr.allocate(granularity);  // the failed placement was undone: still right after a
  EXPECT_EQ(as_char(b), as_char(a) + granularity);
  mr.deallocate(b, granularity);
  mr.deallocate(a, granularity);
}

TEST_F(Vmm, AFreeOfMemoryItDidNotHandOutIsRefused) {
  void* a = mr.allocate(granularity);
  auto const unmaps = sim.call_count("cuMemUnmap");
  mr.deallocate(as_char(a) + 256, granularity);  // inside, not an allocation
  int host = 0;
  mr.deallocate(&host, sizeof host);
  if (sim.present()) { EXPECT_EQ(sim.call_count("cuMemUnmap"), unmaps); }
  EXPECT_EQ(mr.info().reserved_bytes, granularity);
  EXPECT_TRUE(test::fill_and_check(a, granularity, 0x11));  // still mapped
  mr.deallocate(a, granularity);
}

TEST_F(Vmm, PeersMayReadAndWriteIt) {
  auto const& d = detail::driver();
  int count = 0;
  ASSERT_EQ(d.cuDeviceGetCount(&count), CUDA_SUCCESS);
  if (count < 2) GTEST_SKIP() << "one device";
  using get_access = CUresult (*)(unsigned long long*, CUmemLocation const*, CUdeviceptr);
  auto const access = reinterpret_cast<get_access>(detail::real_dlsym()(d.handle, "cuMemGetAccess"));
  ASSERT_NE(access, nullptr);
  void* a = mr.allocate(granularity);
  for (int dev = 0; dev < count; ++dev) {
    int can = 1;
    if (dev != 0) { ASSERT_EQ(d.cuDeviceCanAccessPeer(&can, dev, 0), CUDA_SUCCESS); }
    unsigned long long flags = 0;
    CUmemLocation const where{CU_MEM_LOCATION_TYPE_DEVICE, dev};
    ASSERT_EQ(access(&flags, &where, reinterpret_cast<CUdeviceptr>(a)), CUDA_SUCCESS);
    EXPECT_EQ(flags, can != 0 ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE) << "device " << dev;
  }
  mr.deallocate(a, granularity);
}

TEST_F(Vmm, TheDestructorUnmapsWhatIsLeft) {
  if (!sim.present()) GTEST_SKIP() << "counts the simulated device's memory";
  auto const before = sim.live_bytes(0);
  {
    vmm_memory_resource scoped;
    static_cast<void>(scoped.allocate(granularity));
    static_cast<void>(scoped.allocate(3 * granularity));
    EXPECT_EQ(sim.live_bytes(0), before + 4 * granularity);
  }
  EXPECT_EQ(sim.live_bytes(0), before);
}

// CUDA IPC groundwork: any granule, found by an address inside it, exports to a
// POSIX fd that maps exactly that granule's memory again.
TEST_F(Vmm, PagesAreExportableAsPosixFileDescriptors) {
  auto const& d = detail::driver();
  ASSERT_NE(d.cuMemRetainAllocationHandle, nullptr);
  ASSERT_NE(d.cuMemExportToShareableHandle, nullptr);
  ASSERT_NE(d.cuMemImportFromShareableHandle, nullptr);
  int supported = 0;
  ASSERT_EQ(d.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0),
            CUDA_SUCCESS);
  if (supported == 0) GTEST_SKIP() << "the device offers no POSIX fd handles";
  auto const attribute_reads = sim.call_count("cuDeviceGetAttribute");
  void* a = mr.allocate(3 * granularity);
  EXPECT_EQ(sim.call_count("cuDeviceGetAttribute"), attribute_reads) << "read once per device, in SetUp";
  auto const second = reinterpret_cast<CUdeviceptr>(as_char(a) + granularity);
  ASSERT_EQ(d.cuMemsetD8(second, 0x3c, granularity), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h{};
  ASSERT_EQ(d.cuMemRetainAllocationHandle(&h, as_char(a) + granularity + 4096), CUDA_SUCCESS);
  int fd = -1;
  ASSERT_EQ(d.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(d.cuMemRelease(h), CUDA_SUCCESS);
  CUmemGenericAllocationHandle imported{};
  ASSERT_EQ(d.cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_SUCCESS);
  EXPECT_EQ(close(fd), 0);
  CUdeviceptr view{};
  ASSERT_EQ(d.cuMemAddressReserve(&view, granularity, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.cuMemMap(view, granularity, 0, imported, 0), CUDA_SUCCESS);
  CUmemAccessDesc const rw{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ASSERT_EQ(d.cuMemSetAccess(view, granularity, &rw, 1), CUDA_SUCCESS);
  std::vector<unsigned char> bytes(granularity);
  ASSERT_EQ(d.cuMemcpyDtoH(bytes.data(), view, granularity), CUDA_SUCCESS);
  EXPECT_EQ(std::count(bytes.begin(), bytes.end(), 0x3c), static_cast<std::ptrdiff_t>(granularity));
  EXPECT_EQ(d.cuMemUnmap(view, granularity), CUDA_SUCCESS);
  EXPECT_EQ(d.cuMemAddressFree(view, granularity), CUDA_SUCCESS);
  EXPECT_EQ(d.cuMemRelease(imported), CUDA_SUCCESS);
  mr.deallocate(a, 3 * granularity);
  EXPECT_EQ(mr.info().reserved_bytes, 0U);
}

// Where the device has no POSIX fd handles (0), or says it has them and then
// refuses them (2), pages are still created, plain; a refusal is tried once.
TEST_F(Vmm, PagesAreCreatedPlainWhereTheyCannotBeShared) {
  if (!sim.present()) GTEST_SKIP() << "needs the simulated device (its switch for shareable handles)";
  auto const& d = detail::driver();
  struct restore {
    ~restore() { test::sim_control::get().set_posix_fd_handles(1); }
  } const restore_default;
  for (int mode : {0, 2}) {
    SCOPED_TRACE(mode);
    sim.set_posix_fd_handles(mode);
    vmm_memory_resource plain;  // resolves the device now, with the switch set
    auto const creates = sim.call_count("cuMemCreate");
    void* a = plain.allocate(2 * granularity);
    ASSERT_NE(a, nullptr);
    // Refused once (mode 2), then two plain pages; later pages ask no more.
    EXPECT_EQ(sim.call_count("cuMemCreate"), creates + (mode == 2 ? 3 : 2));
    void* b = plain.allocate(granularity);
    EXPECT_EQ(sim.call_count("cuMemCreate"), creates + (mode == 2 ? 4 : 3));
    EXPECT_TRUE(test::fill_and_check(a, 2 * granularity, 0x21));
    CUmemGenericAllocationHandle h{};
    ASSERT_EQ(d.cuMemRetainAllocationHandle(&h, b), CUDA_SUCCESS);
    int fd = -1;
    EXPECT_EQ(d.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(d.cuMemRelease(h), CUDA_SUCCESS);
    plain.deallocate(b, granularity);
    plain.deallocate(a, 2 * granularity);
  }
}

TEST_F(Vmm, APoolOverItHoldsOneRegionThatGrowsInPlace) {
  pool_memory_resource pool{&mr, pool_options{std::size_t{0}, {}, granularity}};
  void* a = pool.allocate(granularity);
  pool.deallocate(a, granularity);
  void* b = pool.allocate(5 * granularity);  // the free granule at the end and 4 more
  EXPECT_EQ(b, a);
  EXPECT_EQ(pool.pool_size(), 5 * granularity);
  EXPECT_TRUE(test::fill_and_check(b, 5 * granularity, 0x77));
  pool.deallocate(b, 5 * granularity);
  EXPECT_EQ(pool.release(), 5 * granularity);
  EXPECT_EQ(mr.info().reserved_bytes, 0U);
}

// A region that is never entirely free still shrinks: release() unmaps the free
// end and leaves the block in use mapped, its contents intact; the pool then grows
// into the same addresses again. Synchronous frees (the clean list, given back on
// the legacy stream) and stream-ordered ones (given back on their stream).
TEST_F(Vmm, APoolGivesBackTheFreeEndOfARegionInUse) {
  auto const& d = detail::driver();
  CUstream stream = nullptr;
  ASSERT_EQ(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  for (stream_ref s : {stream_ref{}, stream_ref{stream}}) {
    pool_memory_resource pool{&mr, pool_options{std::size_t{0}, {}, granularity}};
    void* a = pool.allocate(granularity, s);
    void* b = pool.allocate(3 * granularity, s);  // joins a's region
    ASSERT_EQ(as_char(b), as_char(a) + granularity);
    ASSERT_TRUE(test::fill_and_check(a, 4 * granularity, 0x21));
    ASSERT_TRUE(test::fill_and_check(a, granularity, 0x42));
    pool.deallocate(b, 3 * granularity, s);
    EXPECT_EQ(pool.release(), 3 * granularity);
    EXPECT_EQ(pool.pool_size(), granularity);
    EXPECT_EQ(mr.info().reserved_bytes, granularity);
    EXPECT_TRUE(test::check(a, granularity, 0x42));  // still mapped, untouched
    void* c = pool.allocate(2 * granularity, s);     // mapped again right after a
    EXPECT_EQ(c, b);
    EXPECT_EQ(pool.pool_size(), 3 * granularity);
    EXPECT_TRUE(test::fill_and_check(c, 2 * granularity, 0x63));
    EXPECT_TRUE(test::check(a, granularity, 0x42));
    pool.deallocate(c, 2 * granularity, s);
    pool.deallocate(a, granularity, s);
    EXPECT_EQ(pool.release(), 3 * granularity);
    EXPECT_EQ(mr.info().reserved_bytes, 0U);
  }
  ASSERT_EQ(d.cuStreamDestroy(stream), CUDA_SUCCESS);
}

// ---- the fallback: a device without virtual memory management -------------------

/// Runs this executable again, on the simulated device with virtual memory
/// management switched off, for the VmmFallback tests only; their exit status.
int run_without_vmm() {
  std::vector<std::string> env_text{"GPUMEM_SIM_NO_VMM=1"};
  for (char** e = environ; *e != nullptr; ++e) env_text.emplace_back(*e);
  std::vector<char*> env;
  for (auto& s : env_text) env.push_back(s.data());
  env.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter = "--gtest_filter=VmmFallback.*";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, env.data()) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(VmmFallback, FallsBackToCuMemAllocAndNeverJoins) {
  auto& sim = test::sim_control::get();
  if (!sim.present()) GTEST_SKIP() << "needs the simulated device (its switch for virtual memory management)";
  if (!vmm_disabled()) {
    EXPECT_EQ(run_without_vmm(), 0);
    return;
  }
  ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
  vmm_memory_resource mr;
  EXPECT_EQ(mr.contiguous_granularity(), 0U);
  auto const allocs = sim.call_count("cuMemAlloc_v2");
  void* a = mr.allocate(MiB);
  void* b = mr.allocate(MiB);
  EXPECT_EQ(sim.call_count("cuMemAlloc_v2"), allocs + 2);
  EXPECT_EQ(mr.fallback_allocations(), 2U);
  EXPECT_FALSE(mr.extends(as_char(a) + MiB, b));
  EXPECT_TRUE(test::fill_and_check(a, MiB, 0x42));
  mr.deallocate(a, MiB);
  mr.deallocate(b, MiB);
  EXPECT_EQ(mr.info().reserved_bytes, 0U);
  {
    pool_memory_resource pool{&mr, pool_options{std::size_t{0}, {}, 2 * MiB}};
    void* p = pool.allocate(3 * MiB);
    EXPECT_EQ(pool.pool_size(), 3 * MiB);  // not rounded: no granularity to round to
    pool.deallocate(p, 3 * MiB);
  }
  EXPECT_EQ(mr.info().reserved_bytes, 0U);
}

}  // namespace
}  // namespace gpumem
