#include "runtime.hpp"

#include <dlfcn.h>

#include <mutex>
#include <vector>

namespace gpumemsim::rt {
namespace {

constexpr int runtime_version = 13000;

driver_table load() noexcept {
  driver_table t;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    t.status = cudaErrorInsufficientDriver;
    return t;
  }
  t.get_proc_address = reinterpret_cast<decltype(t.get_proc_address)>(dlsym(h, "cuGetProcAddress_v2"));
  if (t.get_proc_address == nullptr) {
    t.status = cudaErrorInsufficientDriver;
    return t;
  }
  bool complete = true;
#define SIMRT_RESOLVE(name)                                                                                   \
  {                                                                                                           \
    void* fn = nullptr;                                                                                       \
    CUdriverProcAddressQueryResult found{};                                                                   \
    if (t.get_proc_address(#name, &fn, runtime_version, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS) \
      t.name = reinterpret_cast<decltype(t.name)>(fn);                                                        \
    else                                                                                                      \
      complete = false;                                                                                       \
  }
  SIMRT_DRIVER_FUNCTIONS(SIMRT_RESOLVE)
#undef SIMRT_RESOLVE
  if (!complete) {
    t.status = cudaErrorInsufficientDriver;
    return t;
  }
  t.status = t.cuInit(0) == CUDA_SUCCESS ? cudaSuccess : cudaErrorNoDevice;
  return t;
}

struct thread_state {
  int device = 0;
  bool bound = false;  // a context was made (or found) current for this thread
  cudaError_t last = cudaSuccess;
};
thread_state& self() noexcept {
  thread_local thread_state t;
  return t;
}

// Primary contexts are retained once per process, as cudart does.
std::mutex g_retain_mutex;
std::vector<CUcontext> g_primary;

}  // namespace

cudaError_t primary_context(int device, CUcontext* out) noexcept {
  auto const& d = driver();
  std::lock_guard lock(g_retain_mutex);
  auto const i = static_cast<std::size_t>(device);
  if (g_primary.size() <= i) g_primary.resize(i + 1, nullptr);
  if (g_primary[i] == nullptr) {
    CUdevice dev{};
    if (CUresult r = d.cuDeviceGet(&dev, device); r != CUDA_SUCCESS) return to_runtime_error(r);
    if (CUresult r = d.cuDevicePrimaryCtxRetain(&g_primary[i], dev); r != CUDA_SUCCESS) return to_runtime_error(r);
  }
  *out = g_primary[i];
  return cudaSuccess;
}

driver_table const& driver() noexcept {
  static driver_table const t = load();
  return t;
}

cudaError_t to_runtime_error(CUresult r) noexcept {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_DEINITIALIZED: return cudaErrorCudartUnloading;
    case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return cudaErrorContextIsDestroyed;
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: return cudaErrorPeerAccessAlreadyEnabled;
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: return cudaErrorPeerAccessNotEnabled;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    case CUDA_ERROR_NOT_READY: return cudaErrorNotReady;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return cudaErrorHostMemoryAlreadyRegistered;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return cudaErrorHostMemoryNotRegistered;
    case CUDA_ERROR_ILLEGAL_STATE: return cudaErrorIllegalState;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_NOT_PERMITTED: return cudaErrorNotPermitted;
    case CUDA_ERROR_ALREADY_MAPPED: return cudaErrorAlreadyMapped;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return cudaErrorStreamCaptureUnsupported;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return cudaErrorStreamCaptureInvalidated;
    case CUDA_ERROR_STREAM_CAPTURE_MERGE: return cudaErrorStreamCaptureMerge;
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: return cudaErrorStreamCaptureUnmatched;
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED: return cudaErrorStreamCaptureUnjoined;
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION: return cudaErrorStreamCaptureIsolation;
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: return cudaErrorStreamCaptureImplicit;
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: return cudaErrorStreamCaptureWrongThread;
    default: return cudaErrorUnknown;
  }
}

cudaError_t& last_error() noexcept { return self().last; }

cudaError_t record(cudaError_t e) noexcept {
  if (e != cudaSuccess) self().last = e;
  return e;
}

cudaError_t ensure_context() noexcept {
  auto const& d = driver();
  if (d.status != cudaSuccess) return d.status;
  thread_state& t = self();
  if (t.bound) return cudaSuccess;
  CUcontext current = nullptr;
  if (CUresult r = d.cuCtxGetCurrent(&current); r != CUDA_SUCCESS) return to_runtime_error(r);
  if (current != nullptr) {
    // A context the program made current through the driver API is adopted.
    CUdevice dev{};
    if (d.cuCtxGetDevice(&dev) == CUDA_SUCCESS) t.device = dev;
    t.bound = true;
    return cudaSuccess;
  }
  return set_device(t.device);
}

int current_device() noexcept {
  auto const& d = driver();
  if (d.status == cudaSuccess) {
    CUcontext current = nullptr;
    CUdevice dev{};
    if (d.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current != nullptr && d.cuCtxGetDevice(&dev) == CUDA_SUCCESS)
      return dev;
  }
  return self().device;
}

cudaError_t set_device(int device) noexcept {
  auto const& d = driver();
  if (d.status != cudaSuccess) return d.status;
  int count = 0;
  if (CUresult r = d.cuDeviceGetCount(&count); r != CUDA_SUCCESS) return to_runtime_error(r);
  if (device < 0 || device >= count) return cudaErrorInvalidDevice;
  CUcontext ctx = nullptr;
  if (cudaError_t e = primary_context(device, &ctx); e != cudaSuccess) return e;
  if (CUresult r = d.cuCtxSetCurrent(ctx); r != CUDA_SUCCESS) return to_runtime_error(r);
  self().device = device;
  self().bound = true;
  return cudaSuccess;
}

}  // namespace gpumemsim::rt
