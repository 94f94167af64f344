// cudaMalloc*, cudaFree*, memory queries, memset/memcpy, pools, IPC.

#include "runtime.hpp"

#include <cstdint>
#include <cstring>

using namespace gpumemsim::rt;

namespace {

CUdeviceptr dptr(void const* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }
void* hptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }
CUstream drv(cudaStream_t s) { return reinterpret_cast<CUstream>(s); }

}  // namespace

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (devPtr == nullptr) return record(cudaErrorInvalidValue);
  if (size == 0) {  // no driver call, as cudart does
    *devPtr = nullptr;
    return cudaSuccess;
  }
  SIMRT_INIT();
  CUdeviceptr p = 0;
  if (CUresult r = driver().cuMemAlloc(&p, size); r != CUDA_SUCCESS) return record(r);
  *devPtr = hptr(p);
  return cudaSuccess;
}

cudaError_t cudaFree(void* devPtr) {
  SIMRT_INIT();
  if (devPtr == nullptr) return cudaSuccess;
  return record(driver().cuMemFree(dptr(devPtr)));
}

cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  if (devPtr == nullptr) return record(cudaErrorInvalidValue);
  SIMRT_INIT();
  if (size == 0) {  // measured: success with a null pointer
    *devPtr = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr p = 0;
  if (CUresult r = driver().cuMemAllocManaged(&p, size, flags); r != CUDA_SUCCESS) return record(r);
  *devPtr = hptr(p);
  return cudaSuccess;
}

cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  if (devPtr == nullptr || pitch == nullptr) return record(cudaErrorInvalidValue);
  if (width == 0 || height == 0) {  // measured: success, NULL, pitch 0
    *devPtr = nullptr;
    *pitch = 0;
    return cudaSuccess;
  }
  SIMRT_INIT();
  CUdeviceptr p = 0;
  if (CUresult r = driver().cuMemAllocPitch(&p, pitch, width, height, 4); r != CUDA_SUCCESS) return record(r);
  *devPtr = hptr(p);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  if (devPtr == nullptr) return record(cudaErrorInvalidValue);
  SIMRT_INIT();
  if (size == 0) {  // measured: success with a null pointer
    *devPtr = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr p = 0;
  if (CUresult r = driver().cuMemAllocAsync(&p, size, drv(stream)); r != CUDA_SUCCESS) return record(r);
  *devPtr = hptr(p);
  return cudaSuccess;
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  if (ptr == nullptr) return record(cudaErrorInvalidValue);
  SIMRT_INIT();
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr p = 0;
  CUresult r = driver().cuMemAllocFromPoolAsync(&p, size, reinterpret_cast<CUmemoryPool>(pool), drv(stream));
  if (r != CUDA_SUCCESS) return record(r);
  *ptr = hptr(p);
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  SIMRT_INIT();
  if (devPtr == nullptr) return cudaSuccess;  // measured
  return record(driver().cuMemFreeAsync(dptr(devPtr), drv(stream)));
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {  // NULL outputs allowed (measured)
  SIMRT_INIT();
  return record(driver().cuMemGetInfo(free, total));
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) return record(cudaErrorInvalidValue);
  SIMRT_INIT();
  unsigned memory_type = 0;
  unsigned is_managed = 0;
  int ordinal = -2;
  CUdeviceptr device_pointer = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_POINTER};
  void* data[] = {&memory_type, &is_managed, &ordinal, &device_pointer};
  if (CUresult r = driver().cuPointerGetAttributes(4, attrs, data, dptr(ptr)); r != CUDA_SUCCESS) return record(r);
  std::memset(attributes, 0, sizeof *attributes);
  if (is_managed != 0) {
    attributes->type = cudaMemoryTypeManaged;
    attributes->device = ordinal;
    attributes->devicePointer = const_cast<void*>(ptr);
    attributes->hostPointer = const_cast<void*>(ptr);
  } else if (memory_type == CU_MEMORYTYPE_HOST) {
    attributes->type = cudaMemoryTypeHost;
    attributes->device = ordinal;
    attributes->devicePointer = hptr(device_pointer);
    attributes->hostPointer = const_cast<void*>(ptr);
  } else if (memory_type == CU_MEMORYTYPE_DEVICE) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = ordinal;
    attributes->devicePointer = hptr(device_pointer);
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    attributes->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  SIMRT_INIT();
  return record(driver().cuMemsetD8(dptr(devPtr), static_cast<unsigned char>(value), count));
}

cudaError_t cudaMemAdvise(const void* devPtr, size_t count, cudaMemoryAdvise advice, cudaMemLocation location) {
  SIMRT_INIT();
  CUmemLocation const at{static_cast<CUmemLocationType>(location.type), location.id};
  return record(driver().cuMemAdvise(dptr(devPtr), count, static_cast<CUmem_advise>(advice), at));
}

cudaError_t cudaMemPrefetchAsync(const void* devPtr, size_t count, cudaMemLocation location, unsigned int flags,
                                 cudaStream_t stream) {
  SIMRT_INIT();
  CUmemLocation const at{static_cast<CUmemLocationType>(location.type), location.id};
  return record(driver().cuMemPrefetchAsync(dptr(devPtr), count, at, flags, drv(stream)));
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  SIMRT_INIT();
  return record(driver().cuMemsetD8Async(dptr(devPtr), static_cast<unsigned char>(value), count, drv(stream)));
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return record(cudaErrorInvalidMemcpyDirection);
  SIMRT_INIT();
  return record(driver().cuMemcpy(dptr(dst), dptr(src), count));
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return record(cudaErrorInvalidMemcpyDirection);
  SIMRT_INIT();
  return record(driver().cuMemcpyAsync(dptr(dst), dptr(src), count, drv(stream)));
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  SIMRT_INIT();
  return record(driver().cuDeviceGetDefaultMemPool(reinterpret_cast<CUmemoryPool*>(pool), device));
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  if (pool == nullptr || props == nullptr) return record(cudaErrorInvalidValue);
  SIMRT_INIT();
  CUmemPoolProps p{};
  p.allocType = static_cast<CUmemAllocationType>(props->allocType);
  p.handleTypes = static_cast<CUmemAllocationHandleType>(props->handleTypes);
  p.location.type = static_cast<CUmemLocationType>(props->location.type);
  p.location.id = props->location.id;
  p.maxSize = props->maxSize;
  return record(driver().cuMemPoolCreate(reinterpret_cast<CUmemoryPool*>(pool), &p));
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  SIMRT_INIT();
  return record(driver().cuMemPoolDestroy(reinterpret_cast<CUmemoryPool>(pool)));
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  SIMRT_INIT();
  return record(driver().cuMemPoolSetAttribute(reinterpret_cast<CUmemoryPool>(pool),
                                               static_cast<CUmemPool_attribute>(attr), value));
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  SIMRT_INIT();
  return record(driver().cuMemPoolGetAttribute(reinterpret_cast<CUmemoryPool>(pool),
                                               static_cast<CUmemPool_attribute>(attr), value));
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t minBytesToKeep) {
  SIMRT_INIT();
  return record(driver().cuMemPoolTrimTo(reinterpret_cast<CUmemoryPool>(pool), minBytesToKeep));
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
  if (handle == nullptr) return record(cudaErrorInvalidValue);
  SIMRT_INIT();
  CUipcMemHandle h{};
  if (CUresult r = driver().cuIpcGetMemHandle(&h, dptr(devPtr)); r != CUDA_SUCCESS) return record(r);
  static_assert(sizeof h == sizeof *handle);
  std::memcpy(handle, &h, sizeof h);
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
  if (devPtr == nullptr) return record(cudaErrorInvalidValue);
  SIMRT_INIT();
  CUipcMemHandle h{};
  std::memcpy(&h, &handle, sizeof h);
  CUdeviceptr p = 0;
  // Opening in the exporting process: CUDA_ERROR_INVALID_CONTEXT -> cudaErrorDeviceUninitialized (measured).
  if (CUresult r = driver().cuIpcOpenMemHandle(&p, h, flags); r != CUDA_SUCCESS) return record(r);
  *devPtr = hptr(p);
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void* devPtr) {
  SIMRT_INIT();
  return record(driver().cuIpcCloseMemHandle(dptr(devPtr)));
}
