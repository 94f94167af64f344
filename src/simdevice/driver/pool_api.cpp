// cuMemPool* and the per-device default/current pools.

#include "pool.hpp"
#include "state.hpp"

using namespace gpumemsim;

namespace {

CUresult live_pool(CUmemoryPool h, char const* entry, mem_pool** out) {
  if (CUresult r = init_status(); r != CUDA_SUCCESS) return r;
  if (h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = pool_from_handle(h, entry);
  return *out != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  SIM_ENTRY("cuMemPoolCreate");
  SIM_REQUIRE_INIT();
  if (pool == nullptr || props == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE && props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (device_at(props->location.id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *pool = to_handle(new_pool(props->location.id, false));
  return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool h) {
  SIM_ENTRY("cuMemPoolDestroy");
  mem_pool* p = nullptr;
  if (CUresult r = live_pool(h, "cuMemPoolDestroy", &p); r != CUDA_SUCCESS) return r;
  if (p->is_default) return CUDA_ERROR_INVALID_VALUE;
  // Like CUDA: outstanding allocations stay valid and are freed normally later.
  device* d = device_at(p->device);
  mem_pool* expected = p;
  d->current_pool.compare_exchange_strong(expected, d->default_pool);
  retire_pool(p);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void* value) {
  SIM_ENTRY("cuMemPoolSetAttribute");
  mem_pool* p = nullptr;
  if (CUresult r = live_pool(h, "cuMemPoolSetAttribute", &p); r != CUDA_SUCCESS) return r;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(p->mutex);
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: p->reuse_follow_event = *static_cast<int*>(value); break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: p->reuse_opportunistic = *static_cast<int*>(value); break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: p->reuse_internal_deps = *static_cast<int*>(value); break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->release_threshold = *static_cast<cuuint64_t*>(value); break;
    // Only a reset to 0 is allowed for the high watermarks, as in CUDA.
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      p->used_high = p->used;
      break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void* value) {
  SIM_ENTRY("cuMemPoolGetAttribute");
  mem_pool* p = nullptr;
  if (CUresult r = live_pool(h, "cuMemPoolGetAttribute", &p); r != CUDA_SUCCESS) return r;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(p->mutex);
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: *static_cast<int*>(value) = p->reuse_follow_event; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: *static_cast<int*>(value) = p->reuse_opportunistic; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *static_cast<int*>(value) = p->reuse_internal_deps; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *static_cast<cuuint64_t*>(value) = p->release_threshold; break;
    // The sim's pools never cache: reserved memory is exactly the used memory.
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *static_cast<cuuint64_t*>(value) = p->used; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *static_cast<cuuint64_t*>(value) = p->used_high; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemPoolTrimTo(CUmemoryPool h, size_t min_bytes_to_keep) {
  SIM_ENTRY("cuMemPoolTrimTo");
  (void)min_bytes_to_keep;  // nothing cached, nothing to trim
  mem_pool* p = nullptr;
  return live_pool(h, "cuMemPoolTrimTo", &p);
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  SIM_ENTRY("cuDeviceGetDefaultMemPool");
  SIM_REQUIRE_INIT();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  device* d = device_at(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *pool = to_handle(d->default_pool);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  SIM_ENTRY("cuDeviceGetMemPool");
  SIM_REQUIRE_INIT();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  device* d = device_at(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *pool = to_handle(d->current_pool.load());
  return CUDA_SUCCESS;
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool h) {
  SIM_ENTRY("cuDeviceSetMemPool");
  mem_pool* p = nullptr;
  if (CUresult r = live_pool(h, "cuDeviceSetMemPool", &p); r != CUDA_SUCCESS) return r;
  device* d = device_at(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (p->device != dev) return CUDA_ERROR_INVALID_VALUE;
  d->current_pool.store(p);
  return CUDA_SUCCESS;
}
