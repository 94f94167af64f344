// Allocation, free, memory queries: cuMemAlloc*, cuMemFree*, cuMemGetInfo,
// cuMemGetAddressRange, cuPointerGetAttribute(s).

#include "host_memory.hpp"
#include "memory.hpp"
#include "pool.hpp"
#include "stream.hpp"
#include "vmm.hpp"

#include <algorithm>
#include <cstring>

using namespace gpumemsim;

namespace gpumemsim {

std::uint64_t next_buffer_id() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool lookup_pointer(std::uintptr_t ptr, pointer_info* out) {
  if (device* d = device_of(ptr); d != nullptr) {
    allocation a;
    if (!d->heap->find(ptr, &a)) return false;
    out->device = d->ordinal;
    out->base = a.base;
    out->size = a.requested;
    out->managed = a.managed;
    out->pool = a.pool;
    out->ctx = a.ctx;
    out->buffer_id = a.buffer_id;
    out->range_base = out->base;
    out->range_size = out->size;
    return true;
  }
  if (ipc_lookup(ptr, out)) {
    out->range_base = out->base;
    out->range_size = out->size;
    return true;
  }
  if (vmm_state::get().lookup(ptr, out)) return true;
  return host_lookup(ptr, out);
}

CUresult check_device_range(std::uintptr_t ptr, std::size_t bytes, access_kind how) {
  if (device_of(ptr) == nullptr) {
    switch (vmm_state::get().check_range(ptr, bytes, how)) {
      case vmm_state::range_status::ok: return CUDA_SUCCESS;
      case vmm_state::range_status::inaccessible:
        // On a GPU this is an illegal address, not always a clean error: a bug either way.
        violation("%s of %zu bytes at %#zx: virtual memory not mapped with %s access",
                  how == access_kind::write ? "write" : "read", bytes, static_cast<std::size_t>(ptr),
                  how == access_kind::write ? "read-write" : "read");
        return CUDA_ERROR_INVALID_VALUE;
      case vmm_state::range_status::outside: break;
    }
  }
  pointer_info info;
  if (!lookup_pointer(ptr, &info)) return CUDA_ERROR_INVALID_VALUE;
  return ptr + bytes <= info.base + info.size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

bool is_device_address(std::uintptr_t ptr) noexcept {
  return device_of(ptr) != nullptr || vmm_state::get().reserved(ptr);
}

CUresult report_bad_free(free_status status, std::uintptr_t ptr, char const* entry) {
  switch (status) {
    case free_status::ok: return CUDA_SUCCESS;
    case free_status::already_freed: violation("double free of %#zx (%s)", static_cast<std::size_t>(ptr), entry); break;
    case free_status::free_pending:
      violation("double free of %#zx (%s): an async free is already queued", static_cast<std::size_t>(ptr), entry);
      break;
    case free_status::interior:
      violation("free of interior pointer %#zx (%s)", static_cast<std::size_t>(ptr), entry);
      break;
    case free_status::unknown:
      violation("free of unknown pointer %#zx (%s)", static_cast<std::size_t>(ptr), entry);
      break;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

void dispose_graph_memory(int dev, std::vector<std::uintptr_t> const& allocations,
                          std::vector<std::uintptr_t> const& frees) {
  device* d = device_at(dev);
  for (std::uintptr_t p : frees) {
    device* owner = device_of(p);
    if (owner == nullptr) continue;
    bool const graph_owned = owner == d && std::find(allocations.begin(), allocations.end(), p) != allocations.end();
    if (!graph_owned) {
      // Never launched: the free never happened, the memory stays the caller's.
      owner->heap->clear_free_pending(p);
      continue;
    }
    allocation a;
    if (owner->heap->check_free(p, &a) == free_status::free_pending) {
      if (a.pool != nullptr) a.pool->on_free(a.size);
      owner->heap->release(p, true);
    }
  }
}

}  // namespace gpumemsim

namespace {

// Allocates on the device of `ctx` and records who owns it (a green context's
// memory belongs to its primary context: guessed).
CUresult allocate_on(context* ctx, std::size_t bytes, bool managed, mem_pool* pool, std::uintptr_t* out) {
  allocation info;
  info.managed = managed;
  info.pool = pool;
  info.ctx = base_context(ctx);
  info.buffer_id = next_buffer_id();
  device* d = device_at(pool != nullptr ? pool->device : ctx->device);
  CUresult r = d->heap->allocate(bytes, info, out);
  if (r == CUDA_SUCCESS && pool != nullptr)
    pool->on_allocate((bytes + device_heap::alignment - 1) / device_heap::alignment * device_heap::alignment);
  return r;
}

CUresult sync_free(CUdeviceptr dptr, char const* entry) {
  if (dptr == 0) return init_status();  // measured: success, even without a context
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_unsafe_call(entry); r != CUDA_SUCCESS) return r;
  auto const p = static_cast<std::uintptr_t>(dptr);
  device* d = device_of(p);
  if (d == nullptr) return report_bad_free(free_status::unknown, p, entry);
  // A synchronous free waits for all work of the context first, like the driver,
  // and of the primary context of the pointer's device with its green contexts.
  synchronize_context(ctx);
  if (&d->ctx != ctx) synchronize_context(&d->ctx);
  allocation a;
  if (free_status st = d->heap->check_free(p, &a); st != free_status::ok) return report_bad_free(st, p, entry);
  if (free_status st = d->heap->release(p, false); st != free_status::ok) return report_bad_free(st, p, entry);
  if (a.pool != nullptr) a.pool->on_free(a.size);
  return CUDA_SUCCESS;
}

CUresult async_alloc(CUdeviceptr* dptr, std::size_t bytes, mem_pool* pool, CUstream h, bool ptsz, char const* entry) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) {  // measured: success with a null pointer
    *dptr = 0;
    return CUDA_SUCCESS;
  }
  if (pool == nullptr) pool = device_at(s->ctx->device)->current_pool.load();
  capture_info const cap = capture_status(s);
  if (cap.status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  std::uintptr_t p = 0;
  if (CUresult r = allocate_on(s->ctx, bytes, false, pool, &p); r != CUDA_SUCCESS) return r;
  if (cap.status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    // A graph allocation: the graph owns it until freed inside the graph or by the caller.
    std::lock_guard lock(capture_mutex());
    cap.g->allocations.push_back(p);
  }
  *dptr = static_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult async_free(CUdeviceptr dptr, CUstream h, bool ptsz, char const* entry) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  if (dptr == 0) return CUDA_SUCCESS;  // measured
  auto const p = static_cast<std::uintptr_t>(dptr);
  device* d = device_of(p);
  if (d == nullptr) return report_bad_free(free_status::unknown, p, entry);
  capture_info const cap = capture_status(s);
  if (cap.status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (free_status st = d->heap->mark_free_pending(p); st != free_status::ok) return report_bad_free(st, p, entry);
  if (cap.status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    std::lock_guard lock(capture_mutex());
    cap.g->frees.push_back(p);
    return CUDA_SUCCESS;
  }
  device_heap* heap = d->heap.get();
  CUresult r = enqueue(s, [heap, p] {
    allocation a;
    if (heap->check_free(p, &a) != free_status::free_pending) return;  // reset meanwhile
    if (a.pool != nullptr) a.pool->on_free(a.size);
    heap->release(p, true);
  });
  if (r != CUDA_SUCCESS) heap->clear_free_pending(p);
  return r;
}

}  // namespace

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  SIM_ENTRY("cuMemAlloc_v2");
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_unsafe_call("cuMemAlloc_v2"); r != CUDA_SUCCESS) return r;
  std::uintptr_t p = 0;
  if (CUresult r = allocate_on(ctx, bytesize, false, nullptr, &p); r != CUDA_SUCCESS) return r;
  *dptr = static_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  SIM_ENTRY("cuMemAllocManaged");
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_unsafe_call("cuMemAllocManaged"); r != CUDA_SUCCESS) return r;
  std::uintptr_t p = 0;
  if (CUresult r = allocate_on(ctx, bytesize, true, nullptr, &p); r != CUDA_SUCCESS) return r;
  *dptr = static_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height, unsigned int element_size) {
  SIM_ENTRY("cuMemAllocPitch_v2");
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_size != 4 && element_size != 8 && element_size != 16) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_unsafe_call("cuMemAllocPitch_v2"); r != CUDA_SUCCESS) return r;
  constexpr std::size_t pitch_alignment = 512;
  if (width > SIZE_MAX - pitch_alignment) return CUDA_ERROR_OUT_OF_MEMORY;
  std::size_t const row = (width + pitch_alignment - 1) / pitch_alignment * pitch_alignment;
  if (height > SIZE_MAX / row) return CUDA_ERROR_OUT_OF_MEMORY;
  std::uintptr_t p = 0;
  if (CUresult r = allocate_on(ctx, row * height, false, nullptr, &p); r != CUDA_SUCCESS) return r;
  *dptr = static_cast<CUdeviceptr>(p);
  *pitch = row;
  return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  SIM_ENTRY("cuMemFree_v2");
  return sync_free(dptr, "cuMemFree_v2");
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream h) {
  SIM_ENTRY("cuMemAllocAsync");
  return async_alloc(dptr, bytesize, nullptr, h, false, "cuMemAllocAsync");
}

SIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream h) {
  SIM_ENTRY("cuMemAllocAsync_ptsz");
  return async_alloc(dptr, bytesize, nullptr, h, true, "cuMemAllocAsync_ptsz");
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream h) {
  SIM_ENTRY("cuMemAllocFromPoolAsync");
  if (CUresult r = init_status(); r != CUDA_SUCCESS) return r;
  mem_pool* p = pool_from_handle(pool, "cuMemAllocFromPoolAsync");
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return async_alloc(dptr, bytesize, p, h, false, "cuMemAllocFromPoolAsync");
}

SIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream h) {
  SIM_ENTRY("cuMemAllocFromPoolAsync_ptsz");
  if (CUresult r = init_status(); r != CUDA_SUCCESS) return r;
  mem_pool* p = pool_from_handle(pool, "cuMemAllocFromPoolAsync_ptsz");
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return async_alloc(dptr, bytesize, p, h, true, "cuMemAllocFromPoolAsync_ptsz");
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream h) {
  SIM_ENTRY("cuMemFreeAsync");
  return async_free(dptr, h, false, "cuMemFreeAsync");
}

SIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream h) {
  SIM_ENTRY("cuMemFreeAsync_ptsz");
  return async_free(dptr, h, true, "cuMemFreeAsync_ptsz");
}

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  SIM_ENTRY("cuMemGetInfo_v2");
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  // Measured: either output may be NULL.
  device_heap& heap = *device_at(ctx->device)->heap;
  if (total_bytes != nullptr) *total_bytes = heap.total();
  if (free_bytes != nullptr) *free_bytes = heap.total() - heap.used();
  return CUDA_SUCCESS;
}

namespace {

// Advice and prefetch take managed memory only (CUDA: CUDA_ERROR_INVALID_VALUE
// otherwise); the sim checks the whole range lies in one managed allocation, so a
// range past the end of a block is caught (guessed: edge_cases.md). Nothing moves:
// the memory is host memory.
CUresult check_managed_range(CUdeviceptr p, std::size_t count) {
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  pointer_info info;
  if (count == 0 || !lookup_pointer(static_cast<std::uintptr_t>(p), &info) || !info.managed) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return static_cast<std::uintptr_t>(p) + count <= info.base + info.size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise /*advice*/, CUmemLocation /*location*/) {
  SIM_ENTRY("cuMemAdvise_v2");
  return check_managed_range(devPtr, count);
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation /*location*/, unsigned int /*flags*/,
                               CUstream /*hStream*/) {
  SIM_ENTRY("cuMemPrefetchAsync_v2");
  return check_managed_range(devPtr, count);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  SIM_ENTRY("cuMemGetAddressRange_v2");
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  pointer_info info;
  if (!lookup_pointer(static_cast<std::uintptr_t>(dptr), &info)) return CUDA_ERROR_NOT_FOUND;
  if (pbase != nullptr) *pbase = static_cast<CUdeviceptr>(info.base);
  if (psize != nullptr) *psize = info.size;
  return CUDA_SUCCESS;
}

namespace {

// One attribute of a known pointer; CUDA_ERROR_INVALID_VALUE for attributes the
// sim does not model.
CUresult write_attribute(void* data, CUpointer_attribute attribute, std::uintptr_t ptr, pointer_info const& info) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      // Memory of a memory pool (cuMemAllocAsync) belongs to no context (measured:
      // NULL on an H200, driver 580); other memory to the context that allocated it.
      // Virtual memory (cuMemMap) belongs to no context either (guessed).
      *static_cast<CUcontext*>(data) = info.pool != nullptr || info.vmm
                                           ? nullptr
                                           : to_handle(info.ctx != nullptr ? info.ctx : &device_at(info.device)->ctx);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = info.host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = static_cast<CUdeviceptr>(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!info.managed && !info.host) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *static_cast<unsigned*>(data) = info.managed ? 1U : 0U; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = info.device; return CUDA_SUCCESS;
    // Documented: the mappable range (for virtual memory, the whole reservation).
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = static_cast<CUdeviceptr>(info.range_base);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<std::size_t*>(data) = info.range_size; return CUDA_SUCCESS;
    // The cuMemMap mapping holding the pointer; modelled for virtual memory only.
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      if (!info.vmm) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUdeviceptr*>(data) = static_cast<CUdeviceptr>(info.base);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      if (!info.vmm) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<std::size_t*>(data) = info.size;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<unsigned*>(data) = 1U; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = info.buffer_id; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      *static_cast<CUmemoryPool*>(data) = info.pool != nullptr ? to_handle(info.pool) : nullptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *static_cast<unsigned*>(data) = 1U; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      *static_cast<unsigned*>(data) = info.managed || info.pool != nullptr || info.vmm ? 0U : 1U;
      return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// Attribute sizes for the "not a CUDA pointer" defaults of cuPointerGetAttributes.
std::size_t attribute_size(CUpointer_attribute attribute) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: return sizeof(CUcontext);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return sizeof(void*);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: return sizeof(std::size_t);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return sizeof(CUmemoryPool);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return sizeof(int);
    default: return sizeof(unsigned);
  }
}

}  // namespace

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  SIM_ENTRY("cuPointerGetAttribute");
  SIM_REQUIRE_INIT();
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  pointer_info info;
  auto const p = static_cast<std::uintptr_t>(ptr);
  if (!lookup_pointer(p, &info)) return CUDA_ERROR_INVALID_VALUE;
  return write_attribute(data, attribute, p, info);
}

CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr) {
  SIM_ENTRY("cuPointerGetAttributes");
  SIM_REQUIRE_INIT();
  if (count == 0 || attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  pointer_info info;
  auto const p = static_cast<std::uintptr_t>(ptr);
  bool const known = lookup_pointer(p, &info);
  for (unsigned i = 0; i < count; ++i) {
    if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    // Unlike the singular call, unknown pointers get zero/NULL values, not an error.
    if (!known || write_attribute(data[i], attributes[i], p, info) != CUDA_SUCCESS) {
      if (attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL && !known) {
        *static_cast<int*>(data[i]) = -2;  // what the driver reports for host memory
      } else {
        std::memset(data[i], 0, attribute_size(attributes[i]));
      }
    }
  }
  return CUDA_SUCCESS;
}
