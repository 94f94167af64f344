#pragma once
// Internal header of the simulated libcudart.so.13.
//
// Like NVIDIA's runtime, it reaches the driver only through function pointers
// from cuGetProcAddress_v2 (found with dlopen("libcuda.so.1") + dlsym), so a
// preloaded shim that answers cuGetProcAddress sees every runtime call.
//
// Thread safety: the driver table is resolved once (thread-safe static); the
// current device, its bound context and the last error are per thread.

#pragma GCC visibility push(default)
#include <cuda_runtime_api.h>
#pragma GCC visibility pop
#include <cuda.h>

namespace gpumemsim::rt {

// X(name): `name` as cuda.h spells it; looked up by that base name ("cuMemAlloc"),
// typed as the ABI version cuda.h maps it to (cuMemAlloc_v2).
// A hand-laid list: clang-format 14 reflows X-macro lists differently on every run.
// clang-format off
#define SIMRT_DRIVER_FUNCTIONS(X)                                                               \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName)         \
  X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDeviceGetUuid) X(cuDevicePrimaryCtxRetain)    \
  X(cuDevicePrimaryCtxReset) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxGetDevice)            \
  X(cuCtxSynchronize) X(cuMemAlloc) X(cuMemFree) X(cuMemAllocManaged) X(cuMemAllocPitch)        \
  X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemAllocFromPoolAsync) X(cuMemGetInfo)               \
  X(cuPointerGetAttributes) X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuMemPoolSetAttribute)     \
  X(cuMemPoolGetAttribute) X(cuMemPoolTrimTo) X(cuDeviceGetDefaultMemPool) X(cuMemsetD8)        \
  X(cuMemsetD8Async) X(cuMemcpy) X(cuMemcpyAsync) X(cuStreamCreate) X(cuStreamDestroy)          \
  X(cuStreamSynchronize) X(cuStreamQuery) X(cuStreamWaitEvent) X(cuEventCreate)                 \
  X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize) X(cuEventDestroy)                      \
  X(cuEventElapsedTime) X(cuLaunchHostFunc) X(cuStreamBeginCapture) X(cuStreamEndCapture)       \
  X(cuThreadExchangeStreamCaptureMode)                                                          \
  X(cuStreamIsCapturing) X(cuGraphDestroy) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle)           \
  X(cuIpcCloseMemHandle) X(cuGetErrorName) X(cuDeviceCanAccessPeer) X(cuCtxEnablePeerAccess)       \
  X(cuCtxDisablePeerAccess) X(cuMemcpyPeer) X(cuMemcpyPeerAsync) X(cuMemHostAlloc) X(cuMemFreeHost)  \
  X(cuMemHostGetDevicePointer) X(cuMemHostGetFlags) X(cuMemHostRegister) X(cuMemHostUnregister)  \
  X(cuMemAdvise) X(cuMemPrefetchAsync)
// clang-format on

struct driver_table {
#define SIMRT_MEMBER(name) decltype(&::name) name = nullptr;
  SIMRT_DRIVER_FUNCTIONS(SIMRT_MEMBER)
#undef SIMRT_MEMBER
  decltype(&::cuGetProcAddress_v2) get_proc_address = nullptr;
  /// cudaSuccess once libcuda.so.1 was found, resolved and cuInit'ed.
  cudaError_t status = cudaErrorInitializationError;
};

/// The driver, resolved on first use.
driver_table const& driver() noexcept;

/// Maps a driver result to the runtime's error code.
cudaError_t to_runtime_error(CUresult r) noexcept;

/// Records `e` as the thread's last error when it is a failure; returns it.
cudaError_t record(cudaError_t e) noexcept;
inline cudaError_t record(CUresult r) noexcept { return record(to_runtime_error(r)); }
cudaError_t& last_error() noexcept;

/// Makes the primary context of the thread's current device current (lazily,
/// like cudart's implicit initialisation).
cudaError_t ensure_context() noexcept;
/// The thread's current device (an explicitly set driver context wins).
int current_device() noexcept;
/// cudaSetDevice.
cudaError_t set_device(int device) noexcept;
/// The primary context of `device`, retained once per process (as cudart does).
cudaError_t primary_context(int device, CUcontext* out) noexcept;

}  // namespace gpumemsim::rt

/// Entry-point prologue: resolve the driver and bind a context, or fail.
#define SIMRT_INIT()                                                                     \
  do {                                                                                   \
    if (cudaError_t simrt_e = ::gpumemsim::rt::ensure_context(); simrt_e != cudaSuccess) \
      return ::gpumemsim::rt::record(simrt_e);                                           \
  } while (0)
