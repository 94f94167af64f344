// Virtual memory management on the simulated device: reservations, physical
// handles charged to the device, mappings, access, and copies through them.

#include "sim_driver.hpp"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t G = std::size_t{2} << 20;  // the sim's granularity

class VmmTest : public SimDriverTest {
 protected:
  static CUmemAllocationProp prop(int device = 0) {
    CUmemAllocationProp p{};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    return p;
  }
  CUmemGenericAllocationHandle create(std::size_t bytes, int device = 0) const {
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp const p = prop(device);
    EXPECT_EQ(drv.cuMemCreate(&h, bytes, &p, 0), CUDA_SUCCESS);
    return h;
  }
  CUdeviceptr reserve(std::size_t bytes) const {
    CUdeviceptr p = 0;
    EXPECT_EQ(drv.cuMemAddressReserve(&p, bytes, 0, 0, 0), CUDA_SUCCESS);
    return p;
  }
  CUresult set_access(CUdeviceptr p, std::size_t bytes, CUmemAccess_flags flags, int device = 0) const {
    CUmemAccessDesc d{};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = device;
    d.flags = flags;
    return drv.cuMemSetAccess(p, bytes, &d, 1);
  }
  std::size_t free_bytes() const {
    std::size_t f = 0;
    EXPECT_EQ(drv.cuMemGetInfo(&f, nullptr), CUDA_SUCCESS);
    return f;
  }
  static std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
    std::vector<unsigned char> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed) >> 3);
    return v;
  }
};

TEST_F(VmmTest, GranularityIsTwoMiBAndPropertiesAreChecked) {
  long const calls = sim.call_count("cuMemGetAllocationGranularity");
  CUmemAllocationProp p = prop();
  std::size_t g = 0;
  ASSERT_EQ(drv.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  EXPECT_EQ(g, G);
  g = 0;
  ASSERT_EQ(drv.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
  EXPECT_EQ(g, G);
  EXPECT_EQ(drv.cuMemGetAllocationGranularity(nullptr, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemGetAllocationGranularity(&g, nullptr, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
  p.type = CU_MEM_ALLOCATION_TYPE_INVALID;
  EXPECT_EQ(drv.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
  p = prop(99);
  EXPECT_EQ(drv.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_DEVICE);
  p = prop();
  p.location.type = CU_MEM_LOCATION_TYPE_HOST;  // host VMM is not simulated
  EXPECT_EQ(drv.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
  p = prop();
  EXPECT_EQ(drv.cuMemGetAllocationGranularity(&g, &p, static_cast<CUmemAllocationGranularity_flags>(2)),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(sim.call_count("cuMemGetAllocationGranularity") - calls, 8);
}

TEST_F(VmmTest, DeviceAttributeSaysSupported) {
  int v = -1;
  ASSERT_EQ(drv.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 1);
}

TEST_F(VmmTest, ReservationIsAlignedCostsNoDeviceMemoryAndFreesExactly) {
  std::size_t const before = free_bytes();
  CUdeviceptr p = reserve(3 * G);
  ASSERT_NE(p, 0U);
  EXPECT_EQ(p % G, 0U);
  EXPECT_EQ(free_bytes(), before);
  CUdeviceptr q = 0;
  EXPECT_EQ(drv.cuMemAddressReserve(&q, G + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemAddressReserve(&q, 0, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemAddressReserve(&q, G, 3 * G, 0, 0), CUDA_ERROR_INVALID_VALUE);  // not a power of two
  EXPECT_EQ(drv.cuMemAddressReserve(&q, G, 0, 0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemAddressReserve(nullptr, G, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  // A larger alignment is honoured.
  ASSERT_EQ(drv.cuMemAddressReserve(&q, G, 8 * G, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(q % (8 * G), 0U);
  EXPECT_EQ(sim.violations(), 0);
  EXPECT_EQ(drv.cuMemAddressFree(p, 2 * G), CUDA_ERROR_INVALID_VALUE);  // not the reserved size
  EXPECT_EQ(drv.cuMemAddressFree(p + G, G), CUDA_ERROR_INVALID_VALUE);  // not the start
  EXPECT_EQ(sim.violations(), 2);
  EXPECT_EQ(drv.cuMemAddressFree(p, 3 * G), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemAddressFree(p, 3 * G), CUDA_ERROR_INVALID_VALUE);  // already freed
  EXPECT_EQ(drv.cuMemAddressFree(q, G), CUDA_SUCCESS);
}

TEST_F(VmmTest, MappedMemoryTakesCopiesMemsetsAndPointerQueries) {
  std::size_t const before = free_bytes();
  CUmemGenericAllocationHandle h = create(2 * G);
  EXPECT_EQ(free_bytes(), before - 2 * G) << "charged like cuMemAlloc";
  EXPECT_EQ(sim.live_allocations(0), 1U);
  EXPECT_EQ(sim.live_bytes(0), 2 * G);
  CUdeviceptr base = reserve(4 * G);
  CUdeviceptr p = base + G;
  ASSERT_EQ(drv.cuMemMap(p, 2 * G, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), before - 2 * G) << "mapping costs nothing more";

  // Mapped but not yet accessible.
  auto const data = pattern(3 * G / 2, 7);
  EXPECT_EQ(drv.cuMemcpyHtoD(p, data.data(), data.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(sim.violations(), 1);
  unsigned long long flags = 99;
  CUmemLocation loc{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  ASSERT_EQ(drv.cuMemGetAccess(&flags, &loc, p), CUDA_SUCCESS);
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);

  ASSERT_EQ(set_access(p, 2 * G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemGetAccess(&flags, &loc, p + G + 5), CUDA_SUCCESS);
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_EQ(drv.cuMemcpyHtoD(p + 100, data.data(), data.size()), CUDA_SUCCESS);
  std::vector<unsigned char> back(data.size());
  ASSERT_EQ(drv.cuMemcpyDtoH(back.data(), p + 100, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, data);
  ASSERT_EQ(drv.cuMemsetD8(p + 2 * G - 64, 0xab, 64), CUDA_SUCCESS);
  unsigned char tail[64] = {};
  ASSERT_EQ(drv.cuMemcpyDtoH(tail, p + 2 * G - 64, sizeof tail), CUDA_SUCCESS);
  for (unsigned char c : tail) ASSERT_EQ(c, 0xab);
  // One byte past the mapping (either end) is reserved only.
  EXPECT_EQ(drv.cuMemsetD8(p + 2 * G - 64, 0xab, 65), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemcpyDtoH(tail, p - 1, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(sim.violations(), 3);

  // Pointer queries: the range is the reservation, the mapping is cuMemMap's.
  int ordinal = -1;
  ASSERT_EQ(drv.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p + 12345), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 0);
  CUdeviceptr start = 0;
  std::size_t size = 0;
  ASSERT_EQ(drv.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 12345), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 12345), CUDA_SUCCESS);
  EXPECT_EQ(start, base);
  EXPECT_EQ(size, 4 * G);
  ASSERT_EQ(drv.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, p + 12345), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, p + 12345), CUDA_SUCCESS);
  EXPECT_EQ(start, p);
  EXPECT_EQ(size, 2 * G);
  ASSERT_EQ(drv.cuMemGetAddressRange(&start, &size, p + 12345), CUDA_SUCCESS);
  EXPECT_EQ(start, p);
  EXPECT_EQ(size, 2 * G);
  unsigned memory_type = 0, ipc = 9;
  int attr_ordinal = -1;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
  void* out[] = {&memory_type, &attr_ordinal, &ipc};
  ASSERT_EQ(drv.cuPointerGetAttributes(3, attrs, out, p), CUDA_SUCCESS);
  EXPECT_EQ(memory_type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  EXPECT_EQ(attr_ordinal, 0);
  EXPECT_EQ(ipc, 0U);
  // Reserved but unmapped: not a device pointer.
  EXPECT_EQ(drv.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, base), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemGetAddressRange(&start, &size, base), CUDA_ERROR_NOT_FOUND);

  CUmemAllocationProp got{};
  ASSERT_EQ(drv.cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
  EXPECT_EQ(got.location.id, 0);
  EXPECT_EQ(got.type, CU_MEM_ALLOCATION_TYPE_PINNED);

  EXPECT_EQ(sim.violations(), 3);
  ASSERT_EQ(drv.cuMemUnmap(p, 2 * G), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemAddressFree(base, 4 * G), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), before);
  EXPECT_GT(sim.call_count("cuMemMap"), 0);
}

TEST_F(VmmTest, OneCopySpansTwoAdjacentMappingsOfTwoHandles) {
  CUmemGenericAllocationHandle a = create(G);
  CUmemGenericAllocationHandle b = create(G);
  CUdeviceptr base = reserve(2 * G);
  ASSERT_EQ(drv.cuMemMap(base, G, 0, a, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemMap(base + G, G, 0, b, 0), CUDA_SUCCESS);
  // One cuMemSetAccess over both mappings.
  ASSERT_EQ(set_access(base, 2 * G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  auto const data = pattern(G, 3);
  CUdeviceptr const mid = base + G / 2;  // [mid, mid + G) straddles the boundary
  ASSERT_EQ(drv.cuMemcpyHtoD(mid, data.data(), data.size()), CUDA_SUCCESS);
  std::vector<unsigned char> back(G);
  ASSERT_EQ(drv.cuMemcpyDtoH(back.data(), mid, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, data);
  // cuMemcpy (unified addressing) and device to device across the boundary too.
  back.assign(G, 0);
  ASSERT_EQ(drv.cuMemcpy(reinterpret_cast<CUdeviceptr>(back.data()), mid, G), CUDA_SUCCESS);
  EXPECT_EQ(back, data);
  CUdeviceptr plain = alloc(G);
  ASSERT_EQ(drv.cuMemcpyDtoD(plain, mid, G), CUDA_SUCCESS);
  back.assign(G, 0);
  ASSERT_EQ(drv.cuMemcpyDtoH(back.data(), plain, G), CUDA_SUCCESS);
  EXPECT_EQ(back, data);
  ASSERT_EQ(drv.cuMemFree(plain), CUDA_SUCCESS);
  // A memset over the last 8 bytes of `a` and the first 8 of `b`.
  ASSERT_EQ(drv.cuMemsetD32(base + G - 8, 0x01020304U, 4), CUDA_SUCCESS);

  // `b` really holds the second half: mapped alone, it shows exactly that.
  ASSERT_EQ(drv.cuMemUnmap(base, 2 * G), CUDA_SUCCESS);  // two whole mappings at once
  ASSERT_EQ(drv.cuMemMap(base, G, 0, b, 0), CUDA_SUCCESS);
  ASSERT_EQ(set_access(base, G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  unsigned words[2] = {};
  ASSERT_EQ(drv.cuMemcpyDtoH(words, base, sizeof words), CUDA_SUCCESS);
  EXPECT_EQ(words[0], 0x01020304U);
  EXPECT_EQ(words[1], 0x01020304U);
  std::vector<unsigned char> second(G / 2 - 8);
  ASSERT_EQ(drv.cuMemcpyDtoH(second.data(), base + 8, second.size()), CUDA_SUCCESS);
  EXPECT_TRUE(std::equal(second.begin(), second.end(), data.begin() + G / 2 + 8));
  EXPECT_EQ(sim.violations(), 0);
  ASSERT_EQ(drv.cuMemUnmap(base, G), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemRelease(a), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemRelease(b), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemAddressFree(base, 2 * G), CUDA_SUCCESS);
}

TEST_F(VmmTest, UnmappedRangeRefusesCopiesAgain) {
  CUmemGenericAllocationHandle h = create(G);
  CUdeviceptr p = reserve(G);
  ASSERT_EQ(drv.cuMemMap(p, G, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(set_access(p, G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  char byte = 1;
  ASSERT_EQ(drv.cuMemcpyHtoD(p, &byte, 1), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemUnmap(p, G), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemcpyHtoD(p, &byte, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemcpyDtoH(&byte, p, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemcpy(reinterpret_cast<CUdeviceptr>(&byte), p, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemsetD8(p, 0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(sim.violations(), 4);
  // A fresh mapping starts without access again (documented).
  ASSERT_EQ(drv.cuMemMap(p, G, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemcpyHtoD(p, &byte, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(drv.cuMemUnmap(p, G), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemUnmap(p, G), CUDA_ERROR_INVALID_VALUE);  // nothing mapped any more
  ASSERT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemAddressFree(p, G), CUDA_SUCCESS);
}

TEST_F(VmmTest, SubRangeUnmapAndOverlappingMapsAreRefused) {
  CUmemGenericAllocationHandle h = create(2 * G);
  CUmemGenericAllocationHandle other = create(G);
  CUdeviceptr base = reserve(4 * G);
  ASSERT_EQ(drv.cuMemMap(base, 2 * G, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemUnmap(base, G), CUDA_ERROR_INVALID_VALUE);      // first half of the mapping
  EXPECT_EQ(drv.cuMemUnmap(base + G, G), CUDA_ERROR_INVALID_VALUE);  // second half
  EXPECT_EQ(drv.cuMemUnmap(base, 3 * G), CUDA_ERROR_INVALID_VALUE);  // past its end
  EXPECT_EQ(sim.violations(), 3);
  EXPECT_EQ(drv.cuMemMap(base, G, 0, other, 0), CUDA_ERROR_INVALID_VALUE);          // same start
  EXPECT_EQ(drv.cuMemMap(base + G, G, 0, other, 0), CUDA_ERROR_INVALID_VALUE);      // inside
  EXPECT_EQ(drv.cuMemMap(base + 4 * G, G, 0, other, 0), CUDA_ERROR_INVALID_VALUE);  // past the reservation
  EXPECT_EQ(drv.cuMemMap(base + 3 * G, 2 * G, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // runs out of it
  EXPECT_EQ(sim.violations(), 7);
  // Arguments: granularity multiples, offset 0 (documented), no flags, size within the handle.
  EXPECT_EQ(drv.cuMemMap(base + 2 * G + 4096, G, 0, other, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemMap(base + 2 * G, G / 2, 0, other, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemMap(base + 2 * G, G, G, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemMap(base + 2 * G, G, 0, other, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemMap(base + 2 * G, 2 * G, 0, other, 0), CUDA_ERROR_INVALID_VALUE);
  // The same handle may be mapped twice; the neighbour fits exactly.
  ASSERT_EQ(drv.cuMemMap(base + 2 * G, G, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemMap(base + 3 * G, G, 0, other, 0), CUDA_SUCCESS);
  // Memory still mapped: the reservation stays.
  EXPECT_EQ(drv.cuMemAddressFree(base, 4 * G), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(drv.cuMemUnmap(base, 4 * G), CUDA_SUCCESS);  // three whole mappings
  ASSERT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemRelease(other), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemAddressFree(base, 4 * G), CUDA_SUCCESS);
}

TEST_F(VmmTest, ReleaseWhileMappedKeepsTheMemoryUntilTheLastUnmap) {
  std::size_t const before = free_bytes();
  CUmemGenericAllocationHandle h = create(G);
  CUdeviceptr a = reserve(G);
  CUdeviceptr b = reserve(G);
  ASSERT_EQ(drv.cuMemMap(a, G, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemMap(b, G, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(set_access(a, G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  ASSERT_EQ(set_access(b, G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemsetD32(a, 0x5eed5eedU, G / 4), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), before - G);
  EXPECT_EQ(sim.live_allocations(0), 1U);
  CUmemAllocationProp got{};
  EXPECT_EQ(drv.cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_ERROR_INVALID_VALUE);  // the handle is gone
  unsigned word = 0;
  ASSERT_EQ(drv.cuMemcpyDtoH(&word, b + G - 4, sizeof word), CUDA_SUCCESS);  // both views share the memory
  EXPECT_EQ(word, 0x5eed5eedU);
  ASSERT_EQ(drv.cuMemUnmap(a, G), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), before - G) << "still mapped at b";
  ASSERT_EQ(drv.cuMemUnmap(b, G), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), before);
  EXPECT_EQ(sim.live_allocations(0), 0U);
  EXPECT_EQ(drv.cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);  // released twice
  EXPECT_EQ(drv.cuMemRelease(0xdeadbeefULL << 20), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(sim.violations(), 2);
  ASSERT_EQ(drv.cuMemAddressFree(a, G), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemAddressFree(b, G), CUDA_SUCCESS);
}

TEST_F(VmmTest, RetainedHandleNeedsItsOwnRelease) {
  std::size_t const before = free_bytes();
  CUmemGenericAllocationHandle h = create(G);
  CUdeviceptr p = reserve(G);
  ASSERT_EQ(drv.cuMemMap(p, G, 0, h, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle again = 0;
  ASSERT_EQ(drv.cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(p + 4096)), CUDA_SUCCESS);
  EXPECT_EQ(again, h);
  EXPECT_EQ(drv.cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(p - 1)), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemUnmap(p, G), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), before - G) << "one reference left";
  CUmemAllocationProp got{};
  EXPECT_EQ(drv.cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), before);
  ASSERT_EQ(drv.cuMemAddressFree(p, G), CUDA_SUCCESS);
}

TEST_F(VmmTest, CreateBeyondTheDeviceCapacityIsOutOfMemory) {
  std::size_t total = 0;
  std::size_t free = 0;
  ASSERT_EQ(drv.cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  ASSERT_EQ(free, total);
  ASSERT_EQ(total % G, 0U) << "the default device size is a granularity multiple";
  CUmemAllocationProp const p = prop();
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(drv.cuMemCreate(&h, total + G, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(drv.cuMemCreate(&h, total, &p, 0), CUDA_SUCCESS);  // all of it, untouched
  EXPECT_EQ(free_bytes(), 0U);
  CUmemGenericAllocationHandle more = 0;
  EXPECT_EQ(drv.cuMemCreate(&more, G, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr d = 0;
  EXPECT_EQ(drv.cuMemAlloc(&d, 256), CUDA_ERROR_OUT_OF_MEMORY) << "one capacity for both";
  ASSERT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), total);
}

TEST_F(VmmTest, CreateChecksItsArguments) {
  CUmemAllocationProp p = prop();
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(drv.cuMemCreate(nullptr, G, &p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemCreate(&h, 0, &p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemCreate(&h, G + 256, &p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemCreate(&h, G, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemCreate(&h, G, &p, 1), CUDA_ERROR_INVALID_VALUE);
  // POSIX fds are the only shareable handles simulated (driver_vmm_ipc_test.cpp).
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  EXPECT_EQ(drv.cuMemCreate(&h, G, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
  p.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR |
                                                                  CU_MEM_HANDLE_TYPE_FABRIC);
  EXPECT_EQ(drv.cuMemCreate(&h, G, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
  p = prop(7);
  EXPECT_EQ(drv.cuMemCreate(&h, G, &p, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(sim.live_allocations(0), 0U);
}

TEST_F(VmmTest, CuMemFreeOfVirtualMemoryIsRefused) {
  CUmemGenericAllocationHandle h = create(G);
  CUdeviceptr p = reserve(G);
  ASSERT_EQ(drv.cuMemMap(p, G, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(set_access(p, G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemFreeAsync(p, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(sim.violations(), 2);
  EXPECT_EQ(sim.live_allocations(0), 1U);
  ASSERT_EQ(drv.cuMemUnmap(p, G), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemAddressFree(p, G), CUDA_SUCCESS);
}

TEST_F(VmmTest, ReadOnlyAndPeerAccess) {
  CUmemGenericAllocationHandle h = create(2 * G, 1);  // memory of device 1
  EXPECT_EQ(sim.live_allocations(1), 1U);
  CUdeviceptr p = reserve(2 * G);
  ASSERT_EQ(drv.cuMemMap(p, 2 * G, 0, h, 0), CUDA_SUCCESS);
  CUmemAccessDesc d[2] = {};
  d[0].location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  d[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  d[1].location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  d[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  ASSERT_EQ(drv.cuMemSetAccess(p, 2 * G, d, 2), CUDA_SUCCESS);
  unsigned long long flags = 0;
  CUmemLocation loc{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  ASSERT_EQ(drv.cuMemGetAccess(&flags, &loc, p), CUDA_SUCCESS);
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READ);
  loc.id = 1;
  ASSERT_EQ(drv.cuMemGetAccess(&flags, &loc, p), CUDA_SUCCESS);
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  int ordinal = -1;
  ASSERT_EQ(drv.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);
  unsigned word = 0x12345678U;
  ASSERT_EQ(drv.cuMemcpyHtoD(p, &word, sizeof word), CUDA_SUCCESS);

  // Read only for everyone: reads work, writes are refused.
  d[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  ASSERT_EQ(drv.cuMemSetAccess(p, 2 * G, d, 1), CUDA_SUCCESS);
  word = 0;
  ASSERT_EQ(drv.cuMemcpyDtoH(&word, p, sizeof word), CUDA_SUCCESS);
  EXPECT_EQ(word, 0x12345678U);
  EXPECT_EQ(drv.cuMemcpyHtoD(p, &word, sizeof word), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemsetD8(p, 0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(sim.violations(), 2);

  // Access on a sub-range (the second granule) only.
  d[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(drv.cuMemSetAccess(p + G, G, d, 1), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemsetD8(p + G, 0, G), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemsetD8(p + G - 1, 0, 2), CUDA_ERROR_INVALID_VALUE);

  // Descriptor checks.
  d[0].location.id = 42;
  EXPECT_EQ(drv.cuMemSetAccess(p, 2 * G, d, 1), CUDA_ERROR_INVALID_DEVICE);
  d[0].location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  d[0].flags = static_cast<CUmemAccess_flags>(2);
  EXPECT_EQ(drv.cuMemSetAccess(p, 2 * G, d, 1), CUDA_ERROR_INVALID_VALUE);
  d[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_EQ(drv.cuMemSetAccess(p, 2 * G, d, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemSetAccess(p, 2 * G, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemSetAccess(p, 3 * G, d, 1), CUDA_ERROR_INVALID_VALUE);  // not fully mapped
  EXPECT_EQ(drv.cuMemSetAccess(p + 4096, G, d, 1), CUDA_ERROR_INVALID_VALUE);
  loc.id = 42;
  EXPECT_EQ(drv.cuMemGetAccess(&flags, &loc, p), CUDA_ERROR_INVALID_DEVICE);

  ASSERT_EQ(drv.cuMemUnmap(p, 2 * G), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemAddressFree(p, 2 * G), CUDA_SUCCESS);
}

TEST_F(VmmTest, UnmapFinishesQueuedWorkFirst) {
  CUmemGenericAllocationHandle h = create(G);
  CUdeviceptr p = reserve(G);
  ASSERT_EQ(drv.cuMemMap(p, G, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(set_access(p, G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  CUstream s = nullptr;
  ASSERT_EQ(drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  unsigned const word = 0xc0ffeeU;
  ASSERT_EQ(drv.cuMemcpyHtoDAsync(p + 64, &word, sizeof word, s), CUDA_SUCCESS);
  // cuMemUnmap is synchronous: the queued copy lands before the memory goes.
  ASSERT_EQ(drv.cuMemUnmap(p, G), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemMap(p, G, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(set_access(p, G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  unsigned got = 0;
  ASSERT_EQ(drv.cuMemcpyDtoH(&got, p + 64, sizeof got), CUDA_SUCCESS);
  EXPECT_EQ(got, word);
  ASSERT_EQ(drv.cuStreamDestroy(s), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemUnmap(p, G), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemAddressFree(p, G), CUDA_SUCCESS);
}

TEST_F(VmmTest, NeedsNoCurrentContextAndSurvivesAPrimaryContextReset) {
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr p = 0;
  std::thread([&] {  // a thread that never made a context current
    CUmemAllocationProp const pr = prop();
    EXPECT_EQ(drv.cuMemCreate(&h, G, &pr, 0), CUDA_SUCCESS);
    EXPECT_EQ(drv.cuMemAddressReserve(&p, G, 0, 0, 0), CUDA_SUCCESS);
    EXPECT_EQ(drv.cuMemMap(p, G, 0, h, 0), CUDA_SUCCESS);
  })
      .join();
  // Documented: destroying a context does not free cuMemCreate memory.
  ASSERT_EQ(drv.cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  EXPECT_EQ(sim.live_allocations(0), 1U);
  ASSERT_EQ(drv.cuMemUnmap(p, G), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(drv.cuMemAddressFree(p, G), CUDA_SUCCESS);
}

TEST_F(VmmTest, EntryPointsResolveThroughGetProcAddress) {
  for (char const* name :
       {"cuMemAddressReserve", "cuMemAddressFree", "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap",
        "cuMemSetAccess", "cuMemGetAccess", "cuMemGetAllocationGranularity", "cuMemGetAllocationPropertiesFromHandle",
        "cuMemRetainAllocationHandle", "cuMemExportToShareableHandle", "cuMemImportFromShareableHandle"}) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status{};
    ASSERT_EQ(drv.cuGetProcAddress(name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS) << name;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS) << name;
    EXPECT_EQ(fn, dlsym(drv.handle, name)) << name;
  }
}

}  // namespace
}  // namespace gpumem::test
