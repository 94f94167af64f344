#pragma once
// The CUDA driver entry points gpumem itself calls, resolved once from
// libcuda.so.1 (dlopen'ed on first use: nothing in gpumem links libcuda).
//
// Inside the preloaded shim these are always the *real* driver functions (looked
// up with the C library's dlsym on libcuda's own handle), so the shim's calls never
// re-enter its hooks. Per-thread-stream (_ptsz) variants are never used: callers
// pass explicit handles (0x2 for the per-thread default stream).

#include <cuda.h>

#include <atomic>

namespace gpumem::detail {

// X(name): `name` is the cuda.h spelling; the macro layer turns it into the
// versioned export (cuMemAlloc -> cuMemAlloc_v2) for the type and the lookup.
// A hand-laid list: clang-format 14 reflows X-macro lists differently on every run.
// clang-format off
#define GPUMEM_DRIVER_FUNCTIONS(X)                                                  \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)            \
  X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)   \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)                         \
  X(cuDevicePrimaryCtxGetState)                                                    \
  X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize)      \
  X(cuMemAlloc) X(cuMemFree) X(cuMemAllocManaged) X(cuMemAllocPitch)               \
  X(cuMemGetInfo) X(cuMemGetAddressRange) X(cuPointerGetAttribute)                 \
  X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemAllocFromPoolAsync)                  \
  X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuMemPoolSetAttribute)                  \
  X(cuMemPoolGetAttribute) X(cuMemPoolTrimTo) X(cuDeviceGetDefaultMemPool)         \
  X(cuStreamCreate) X(cuStreamGetFlags) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery)     \
  X(cuStreamWaitEvent) X(cuStreamIsCapturing) X(cuThreadExchangeStreamCaptureMode) \
  X(cuEventCreate) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize)          \
  X(cuEventDestroy) X(cuLaunchHostFunc) X(cuMemsetD8) X(cuMemcpyHtoD)              \
  X(cuMemcpyDtoH) X(cuDeviceCanAccessPeer)                                        \
  X(cuMemGetAllocationGranularity) X(cuMemAddressReserve) X(cuMemAddressFree)      \
  X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)      \
  X(cuMemRetainAllocationHandle) X(cuMemExportToShareableHandle)                   \
  X(cuMemImportFromShareableHandle) X(cuMemGetAllocationPropertiesFromHandle)      \
  X(cuGreenCtxRecordEvent) X(cuGreenCtxWaitEvent) X(cuStreamGetGreenCtx)         \
  X(cuStreamGetCtx) X(cuMemHostAlloc) X(cuMemFreeHost)
// clang-format on

// The names above are macros in cuda.h for some entries (cuMemAlloc ->
// cuMemAlloc_v2, cuStreamWaitEvent -> ..._ptsz under per-thread builds); never
// compile gpumem with CUDA_API_PER_THREAD_DEFAULT_STREAM.
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#error "gpumem passes explicit stream handles; build it without CUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

struct driver_api {
#define GPUMEM_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  GPUMEM_DRIVER_FUNCTIONS(GPUMEM_DRIVER_MEMBER)
#undef GPUMEM_DRIVER_MEMBER
  void* handle = nullptr;  ///< dlopen handle of libcuda.so.1
  /// CUDA_SUCCESS once cuInit succeeded; the reason otherwise (no driver:
  /// CUDA_ERROR_NO_DEVICE / CUDA_ERROR_NOT_INITIALIZED, as CUDA reports it).
  CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
};

/// The driver table once loaded (published by load_driver_once); null before.
extern std::atomic<driver_api const*> g_loaded_driver;
/// Loads the table and cuInit's (once, whichever thread comes first), publishes it.
[[nodiscard]] driver_api const& load_driver_once() noexcept;

/// The driver table, loaded and cuInit'ed on first call (thread-safe, once).
/// Never makes a CUDA call from a static constructor. Entries missing from an
/// old driver stay null; callers that need them check. Once loaded, one load,
/// inline: every allocation and free asks for it.
[[nodiscard]] inline driver_api const& driver() noexcept {
  if (driver_api const* d = g_loaded_driver.load(std::memory_order_acquire)) [[likely]] { return *d; }
  return load_driver_once();
}

/// Whether libcuda.so.1 could be loaded and initialised.
[[nodiscard]] inline bool driver_available() noexcept { return driver().init_result == CUDA_SUCCESS; }

/// Make sure the calling thread has a current context, as the CUDA runtime does
/// before its first call: if none is current, retain device 0's primary context
/// and make it current. Returns the driver's result.
CUresult ensure_context() noexcept;

/// The device of the current context (after ensure_context()), or -1 on failure.
[[nodiscard]] int current_device() noexcept;

/// Makes `target` the calling thread's current context for a scope and restores
/// the caller's at its end. A null target, or one already current, changes
/// nothing. ok() is false when no driver is loaded, the current context could not
/// be read or `target` could not be made current: the scope then runs in the
/// caller's context.
class scoped_context {
 public:
  explicit scoped_context(CUcontext target) noexcept;
  ~scoped_context();
  scoped_context(scoped_context const&) = delete;
  scoped_context& operator=(scoped_context const&) = delete;
  [[nodiscard]] bool ok() const noexcept { return ok_; }

 private:
  CUcontext saved_{};
  bool switched_ = false;
  bool ok_ = true;
};

}  // namespace gpumem::detail
