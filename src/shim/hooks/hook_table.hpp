#pragma once
// The interposed entry points, their hooks and the real functions behind them.
//
// Every hook is exported from the shim under the entry point's exact name, so the
// dynamic linker binds programs to it; the same table serves dlsym and
// cuGetProcAddress: a real function pointer handed back by the real resolver is
// compared against the real addresses of the hooked functions (never matched by
// name alone: the resolver picks the ABI for the caller's cudaVersion and flags,
// and an old-ABI pointer such as the 32-bit cuMemAlloc must pass through).
//
// Thread safety: real addresses are resolved lazily (retried until the library is
// loaded) and published atomically.

#include <array>
#include <atomic>
#include <cstddef>
#include <string_view>

namespace gpumem::shim {

// Driver entry points (exported by libcuda.so.1).
// A hand-laid list: clang-format 14 reflows X-macro lists differently on every run.
// clang-format off
#define GPUMEM_DRIVER_HOOKS(X)                                                                \
  X(cuGetProcAddress) X(cuGetProcAddress_v2) X(cuMemAlloc_v2) X(cuMemFree_v2)                 \
  X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz)         \
  X(cuMemAllocManaged) X(cuMemAllocPitch_v2) X(cuMemAllocFromPoolAsync)                       \
  X(cuMemAllocFromPoolAsync_ptsz) X(cuMemGetInfo_v2) X(cuMemGetAddressRange_v2)               \
  X(cuPointerGetAttribute) X(cuPointerGetAttributes) X(cuIpcGetMemHandle) X(cuStreamCreate)   \
  X(cuStreamCreateWithPriority) X(cuStreamDestroy)                                            \
  X(cuStreamDestroy_v2) X(cuStreamBeginCapture) X(cuStreamBeginCapture_ptsz)                  \
  X(cuStreamBeginCapture_v2) X(cuStreamBeginCapture_v2_ptsz) X(cuStreamBeginCaptureToGraph)   \
  X(cuStreamBeginCaptureToGraph_ptsz) X(cuStreamEndCapture) X(cuStreamEndCapture_ptsz)        \
  X(cuDevicePrimaryCtxReset) X(cuDevicePrimaryCtxReset_v2) X(cuMemCreate) X(cuMemRelease)      \
  X(cuMemMap) X(cuMemUnmap) X(cuGreenCtxCreate) X(cuGreenCtxDestroy) X(cuCtxSynchronize)       \
  X(cuCtxSynchronize_v2) X(cuStreamSynchronize) X(cuStreamSynchronize_ptsz) X(cuEventSynchronize) \
  X(cuMemPoolTrimTo) X(cuMemPoolGetAttribute) X(cuMemPoolSetAttribute)                       \
  X(cuMemHostAlloc) X(cuMemAllocHost_v2) X(cuMemFreeHost) X(cuMemHostRegister_v2) X(cuMemHostUnregister) \
  X(cuIpcOpenMemHandle_v2) X(cuIpcCloseMemHandle)
// clang-format on

// Runtime entry points (exported by a shared libcudart).
// clang-format off
#define GPUMEM_RUNTIME_HOOKS(X)                                                               \
  X(cudaMalloc) X(cudaFree) X(cudaMallocAsync) X(cudaMallocAsync_ptsz) X(cudaFreeAsync)       \
  X(cudaFreeAsync_ptsz) X(cudaMallocManaged) X(cudaMallocPitch) X(cudaMallocFromPoolAsync)    \
  X(cudaMallocFromPoolAsync_ptsz) X(cudaMemGetInfo) X(cudaPointerGetAttributes)               \
  X(cudaStreamDestroy) X(cudaDeviceReset) X(cudaIpcGetMemHandle) X(cudaGetDriverEntryPoint)   \
  X(cudaGetDriverEntryPoint_ptsz) X(cudaGetDriverEntryPointByVersion)                         \
  X(cudaGetDriverEntryPointByVersion_ptsz) X(cudaDeviceSynchronize) X(cudaStreamSynchronize)   \
  X(cudaStreamSynchronize_ptsz) X(cudaEventSynchronize) X(cudaMemPoolTrimTo)                  \
  X(cudaMemPoolGetAttribute) X(cudaMemPoolSetAttribute) X(cudaHostAlloc) X(cudaMallocHost)     \
  X(cudaFreeHost) X(cudaHostRegister) X(cudaHostUnregister)
// clang-format on

// Every hook, in table order. The shim's version script is generated from this list
// at build time (export_names.hpp): a hook added to a group above is exported with no
// other change; a new group must be added here.
#define GPUMEM_ALL_HOOKS(X) GPUMEM_DRIVER_HOOKS(X) GPUMEM_RUNTIME_HOOKS(X)

enum class hook_id : int {
#define GPUMEM_HOOK_ID(n) h_##n,  // pasted: cuda.h maps some names by macro
  GPUMEM_DRIVER_HOOKS(GPUMEM_HOOK_ID) GPUMEM_RUNTIME_HOOKS(GPUMEM_HOOK_ID)
#undef GPUMEM_HOOK_ID
      count
};

/// The hook exported for `name` (exact entry point name), or nullptr: only names
/// starting "cu[A-Z]" / "cuda[A-Z]" are looked at.
[[nodiscard]] void* hook_by_name(const char* name) noexcept;
/// The entry's id for `name`; hook_id::count when not hooked.
[[nodiscard]] hook_id hook_id_by_name(const char* name) noexcept;
/// Our hook for a function pointer the real resolver returned: the hook whose real
/// function is `fn`; `fn` itself if it already is a hook or is not hooked.
[[nodiscard]] void* hook_for_real(void* fn) noexcept;
inline constexpr std::size_t hook_count = static_cast<std::size_t>(hook_id::count);

/// Which hooks are `_ptsz` entry points, in table order: read from the names at
/// compile time.
inline constexpr std::array<bool, hook_count> g_per_thread_stream_hooks{{
#define GPUMEM_IS_PTSZ(n) std::string_view{#n}.ends_with("_ptsz"),
    GPUMEM_ALL_HOOKS(GPUMEM_IS_PTSZ)
#undef GPUMEM_IS_PTSZ
}};

/// Whether hook `id` reads stream 0 as the calling thread's default stream (a
/// `_ptsz` entry point). Free for a hook that names its own id: a constant.
[[nodiscard]] constexpr bool per_thread_stream(hook_id id) noexcept {
  auto const i = static_cast<std::size_t>(id);
  return i < hook_count && g_per_thread_stream_hooks[i];
}

/// Real addresses, published once found (null: not yet, or the library lacks it).
/// Read through real_function().
extern std::array<std::atomic<void*>, hook_count> g_real_functions;
/// real_function()'s first look for `id`: resolves and publishes it.
[[nodiscard]] void* resolve_real_function(hook_id id) noexcept;

/// The real function behind hook `id` (nullptr while its library is not loaded).
/// Every hook asks for its own: once resolved, one load, inline.
[[nodiscard]] inline void* real_function(hook_id id) noexcept {
  auto const i = static_cast<std::size_t>(id);
  if (i < hook_count) {
    if (void* f = g_real_functions[i].load(std::memory_order_acquire)) [[likely]] { return f; }
  }
  return resolve_real_function(id);
}

/// Typed access: real<decltype(&cuMemAlloc_v2)>(hook_id::cuMemAlloc_v2).
template <class F>
[[nodiscard]] F real(hook_id id) noexcept {
  return reinterpret_cast<F>(real_function(id));
}

/// Whether `name` is one the shim's dlsym looks at: "cu" or "cuda" then an uppercase
/// letter (so cuDNN's "cudnn..." and curl's "curl_..." are never touched).
[[nodiscard]] constexpr bool is_cuda_name(const char* name) noexcept {
  if (name == nullptr || name[0] != 'c' || name[1] != 'u') return false;
  if (name[2] >= 'A' && name[2] <= 'Z') return true;
  return name[2] == 'd' && name[3] == 'a' && name[4] >= 'A' && name[4] <= 'Z';
}

}  // namespace gpumem::shim
