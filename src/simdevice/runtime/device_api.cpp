// Devices, versions, errors, driver entry points.

#include "runtime.hpp"

#include <cstring>

using namespace gpumemsim::rt;

cudaError_t cudaSetDevice(int device) { return record(set_device(device)); }

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return record(cudaErrorInvalidValue);
  if (driver().status != cudaSuccess) return record(driver().status);
  *device = current_device();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return record(cudaErrorInvalidValue);
  if (driver().status != cudaSuccess) {
    *count = 0;
    return record(driver().status);
  }
  return record(driver().cuDeviceGetCount(count));
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return record(cudaErrorInvalidValue);
  auto const& d = driver();
  if (d.status != cudaSuccess) return record(d.status);
  CUdevice dev{};
  if (CUresult r = d.cuDeviceGet(&dev, device); r != CUDA_SUCCESS) return record(r);
  std::memset(prop, 0, sizeof *prop);
  if (CUresult r = d.cuDeviceGetName(prop->name, sizeof prop->name, dev); r != CUDA_SUCCESS) return record(r);
  if (CUresult r = d.cuDeviceTotalMem(&prop->totalGlobalMem, dev); r != CUDA_SUCCESS) return record(r);
  CUuuid uuid{};
  if (CUresult r = d.cuDeviceGetUuid(&uuid, dev); r != CUDA_SUCCESS) return record(r);
  std::memcpy(&prop->uuid, &uuid, sizeof uuid);
  struct field {
    int* out;
    CUdevice_attribute attr;
  } const fields[] = {
      {&prop->major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
      {&prop->minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
      {&prop->multiProcessorCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
      {&prop->warpSize, CU_DEVICE_ATTRIBUTE_WARP_SIZE},
      {&prop->maxThreadsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
      {&prop->maxThreadsPerMultiProcessor, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR},
      {&prop->l2CacheSize, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE},
      {&prop->managedMemory, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY},
      {&prop->concurrentManagedAccess, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS},
      {&prop->unifiedAddressing, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING},
      {&prop->memoryPoolsSupported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED},
      {&prop->pciBusID, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID},
      {&prop->memoryBusWidth, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH},
      {&prop->asyncEngineCount, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT},
  };
  for (field const& f : fields) {
    if (CUresult r = d.cuDeviceGetAttribute(f.out, f.attr, dev); r != CUDA_SUCCESS) return record(r);
  }
  int shared = 0;
  if (CUresult r = d.cuDeviceGetAttribute(&shared, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, dev);
      r != CUDA_SUCCESS)
    return record(r);
  prop->sharedMemPerBlock = static_cast<size_t>(shared);
  return cudaSuccess;
}

cudaError_t cudaDeviceReset(void) {
  SIMRT_INIT();
  return record(driver().cuDevicePrimaryCtxReset(current_device()));
}

cudaError_t cudaDeviceSynchronize(void) {
  SIMRT_INIT();
  return record(driver().cuCtxSynchronize());
}

cudaError_t cudaGetLastError(void) {
  cudaError_t const e = last_error();
  last_error() = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error(); }

namespace {

struct error_text {
  cudaError_t code;
  char const* name;
  char const* text;
};
constexpr error_text errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorCudartUnloading, "cudaErrorCudartUnloading", "driver shutting down"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorDeviceUninitialized, "cudaErrorDeviceUninitialized", "invalid device context"},
    {cudaErrorContextIsDestroyed, "cudaErrorContextIsDestroyed", "context is destroyed"},
    {cudaErrorPeerAccessAlreadyEnabled, "cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled"},
    {cudaErrorPeerAccessNotEnabled, "cudaErrorPeerAccessNotEnabled", "peer access has not been enabled"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorAlreadyMapped, "cudaErrorAlreadyMapped", "resource already mapped"},
    {cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureMerge, "cudaErrorStreamCaptureMerge",
     "operation would result in a merge of separate capture sequences"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "capture was not ended in the same stream as it began"},
    {cudaErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined", "capturing stream has unjoined work"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

error_text const* find_error(cudaError_t e) {
  for (auto const& t : errors) {
    if (t.code == e) return &t;
  }
  return nullptr;
}

}  // namespace

const char* cudaGetErrorName(cudaError_t error) {
  error_text const* t = find_error(error);
  return t != nullptr ? t->name : "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  error_text const* t = find_error(error);
  return t != nullptr ? t->text : "unrecognized error code";
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return record(cudaErrorInvalidValue);
  if (driver().status != cudaSuccess) {
    *version = 0;  // no driver: 0, as cudart reports
    return cudaSuccess;
  }
  return record(driver().cuDriverGetVersion(version));
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return record(cudaErrorInvalidValue);
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || funcPtr == nullptr) return record(cudaErrorInvalidValue);
  auto const& d = driver();
  if (d.status != cudaSuccess) return record(d.status);
  CUdriverProcAddressQueryResult found{};
  CUresult const r = d.get_proc_address(symbol, funcPtr, static_cast<int>(cudaVersion), flags, &found);
  if (status != nullptr) *status = static_cast<cudaDriverEntryPointQueryResult>(found);
  return record(r);  // a missing symbol is reported through `status` only
}

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* status) {
  return cudaGetDriverEntryPointByVersion(symbol, funcPtr, 13000, flags, status);
}
