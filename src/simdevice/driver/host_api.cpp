// Page-locked host memory: cuMemHostAlloc, cuMemAllocHost, cuMemFreeHost,
// cuMemHostGetDevicePointer, cuMemHostGetFlags, cuMemHostRegister,
// cuMemHostUnregister. Unified addressing is modelled: a pinned page's device
// pointer is its host address.

#include "host_memory.hpp"
#include "stream.hpp"

#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>

#include <unistd.h>

using namespace gpumemsim;

namespace {

constexpr std::size_t page = 4096;
constexpr unsigned alloc_flags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
constexpr unsigned register_flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                    CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;

struct host_range {
  std::size_t size = 0;
  unsigned flags = 0;
  context* ctx = nullptr;
  bool registered = false;
  std::uint64_t buffer_id = 0;
};

struct host_table {
  std::mutex mutex;
  std::map<std::uintptr_t, host_range> ranges;  // base -> range; never overlapping
};

host_table& table() {
  static auto* t = new host_table;  // never destroyed: frees may come during exit
  return *t;
}

// The range holding `p`; the caller holds the table's mutex.
std::map<std::uintptr_t, host_range>::iterator find_range(host_table& t, std::uintptr_t p) {
  auto it = t.ranges.upper_bound(p);
  if (it == t.ranges.begin()) return t.ranges.end();
  --it;
  return p < it->first + it->second.size ? it : t.ranges.end();
}

/// The machine's memory: the most a program could pin.
std::size_t physical_memory() noexcept {
  long const pages = sysconf(_SC_PHYS_PAGES);
  long const size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || size <= 0) return std::size_t{1} << 40;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(size);
}

CUresult host_alloc(void** pp, std::size_t bytes, unsigned flags) {
  SIM_REQUIRE_INIT();
  if (pp == nullptr || (flags & ~alloc_flags) != 0) return CUDA_ERROR_INVALID_VALUE;
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (bytes == 0) {  // guessed: success with a null pointer, as cudaMallocHost gives
    *pp = nullptr;
    return CUDA_SUCCESS;
  }
  std::size_t const rounded = (bytes + page - 1) / page * page;
  // More than the machine has can never be pinned: refused before the C library is
  // asked (a sanitizer's allocator aborts on such a size instead of returning null).
  if (rounded < bytes || rounded > physical_memory()) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = std::aligned_alloc(page, rounded);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  host_table& t = table();
  std::lock_guard lock(t.mutex);
  t.ranges[reinterpret_cast<std::uintptr_t>(p)] = host_range{bytes, flags, base_context(ctx), false, next_buffer_id()};
  *pp = p;
  return CUDA_SUCCESS;
}

}  // namespace

namespace gpumemsim {

bool host_lookup(std::uintptr_t ptr, pointer_info* out) {
  host_table& t = table();
  std::lock_guard lock(t.mutex);
  auto it = find_range(t, ptr);
  if (it == t.ranges.end()) return false;
  out->host = true;
  out->registered = it->second.registered;
  out->host_flags = it->second.flags;
  out->ctx = it->second.ctx;
  out->device = it->second.ctx != nullptr ? it->second.ctx->device : 0;
  out->base = it->first;
  out->size = it->second.size;
  out->range_base = it->first;
  out->range_size = it->second.size;
  out->buffer_id = it->second.buffer_id;
  return true;
}

}  // namespace gpumemsim

CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  SIM_ENTRY("cuMemHostAlloc");
  return host_alloc(pp, bytesize, Flags);
}

CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  SIM_ENTRY("cuMemAllocHost_v2");
  return host_alloc(pp, bytesize, 0);
}

CUresult cuMemFreeHost(void* p) {
  SIM_ENTRY("cuMemFreeHost");
  SIM_REQUIRE_INIT();
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  auto const a = reinterpret_cast<std::uintptr_t>(p);
  // Like the driver, a free of pinned memory waits for the context's work first:
  // a queued copy may still read or write the pages.
  synchronize_context(ctx);
  host_table& t = table();
  std::lock_guard lock(t.mutex);
  auto it = t.ranges.find(a);
  if (it == t.ranges.end() || it->second.registered) {
    violation("cuMemFreeHost of %#zx: not the start of a pinned allocation", static_cast<std::size_t>(a));
    return CUDA_ERROR_INVALID_VALUE;
  }
  t.ranges.erase(it);
  std::free(p);
  return CUDA_SUCCESS;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  SIM_ENTRY("cuMemHostGetDevicePointer_v2");
  SIM_REQUIRE_INIT();
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pointer_info info;
  if (!host_lookup(reinterpret_cast<std::uintptr_t>(p), &info)) return CUDA_ERROR_INVALID_VALUE;
  // Registered memory is mapped only when asked for (documented); allocations always
  // are under unified addressing (documented for cudaHostAlloc).
  if (info.registered && (info.host_flags & CU_MEMHOSTREGISTER_DEVICEMAP) == 0) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
  return CUDA_SUCCESS;
}

CUresult cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  SIM_ENTRY("cuMemHostGetFlags");
  SIM_REQUIRE_INIT();
  if (pFlags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  pointer_info info;
  if (!host_lookup(reinterpret_cast<std::uintptr_t>(p), &info) || info.registered) return CUDA_ERROR_INVALID_VALUE;
  *pFlags = info.host_flags;
  return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  SIM_ENTRY("cuMemHostRegister_v2");
  SIM_REQUIRE_INIT();
  if (p == nullptr || bytesize == 0 || (Flags & ~register_flags) != 0) return CUDA_ERROR_INVALID_VALUE;
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  auto const a = reinterpret_cast<std::uintptr_t>(p);
  host_table& t = table();
  std::lock_guard lock(t.mutex);
  auto next = t.ranges.lower_bound(a);
  if ((next != t.ranges.end() && next->first < a + bytesize) || find_range(t, a) != t.ranges.end())
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  t.ranges[a] = host_range{bytesize, Flags, base_context(ctx), true, next_buffer_id()};
  return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void* p) {
  SIM_ENTRY("cuMemHostUnregister");
  SIM_REQUIRE_INIT();
  host_table& t = table();
  std::lock_guard lock(t.mutex);
  auto it = t.ranges.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == t.ranges.end() || !it->second.registered) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  t.ranges.erase(it);
  return CUDA_SUCCESS;
}
