// Pinned host memory entry points: cuMemHostAlloc, cuMemAllocHost_v2, cuMemFreeHost
// served from the host chain (host_memory.hpp); cuMemHostRegister_v2 and
// cuMemHostUnregister handed to CUDA and logged. The runtime's cudaHostAlloc,
// cudaMallocHost, cudaFreeHost, cudaHostRegister and cudaHostUnregister run the
// real runtime (its context set-up and last error stay its own), whose driver calls
// reach the hooks here attributed to the runtime entry point. The pointer queries
// (cuMemHostGetFlags, cuMemHostGetDevicePointer, cuPointerGetAttributes) are not
// interposed: every pooled block is a whole CUDA allocation with the flags asked
// for, made in the context it is handed out in, so CUDA answers for it.

#include "hooks/hook_macros.hpp"
#include "hooks/hook_table.hpp"
#include "serve/host_memory.hpp"
#include "serve/serve.hpp"
#include "shim_state.hpp"

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/pinned_host_memory_resource.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace gpumem::shim {
namespace {

using host_alloc_fn = CUresult (*)(void**, std::size_t, unsigned int);
using alloc_host_fn = CUresult (*)(void**, std::size_t);
using free_host_fn = CUresult (*)(void*);
using host_register_fn = CUresult (*)(void*, std::size_t, unsigned int);
using host_unregister_fn = CUresult (*)(void*);

constexpr cudaError_t no_runtime = cudaErrorInitializationError;

template <class Real>
CUresult serve_host_alloc(void** pp, std::size_t bytes, unsigned flags, const char* entry, Real&& real) noexcept {
  // Odd arguments, no context or one the program made: CUDA's own answers, logged.
  if (pp != nullptr && bytes != 0 && (flags & ~pinned_host_flag_mask) == 0) {
    CUresult const r = host_allocate(pp, bytes, flags, entry);
    if (r != CUDA_ERROR_NOT_SUPPORTED) return r;
  }
  CUresult const r = real();
  note_host_passthrough(true, r == CUDA_SUCCESS && pp != nullptr ? *pp : nullptr, bytes, entry, r);
  return r;
}

template <class Fn, class... Args>
cudaError_t through_runtime(hook_id id, const char* entry, Args... args) noexcept {
  auto const f = real<Fn>(id);
  if (f == nullptr) return no_runtime;
  if (!active()) return f(args...);
  scoped_runtime_call marker{entry};
  return f(args...);
}

}  // namespace

GPUMEM_HOOK(CUresult, cuMemHostAlloc, (void** pp, std::size_t bytes, unsigned int flags)) {
  auto const f = real<host_alloc_fn>(hook_id::h_cuMemHostAlloc);
  if (f == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!interposing_allocations_or_exit()) return f(pp, bytes, flags);
  return serve_host_alloc(pp, bytes, flags, attribute("cuMemHostAlloc"), [&] { return f(pp, bytes, flags); });
}

GPUMEM_HOOK(CUresult, cuMemAllocHost_v2, (void** pp, std::size_t bytes)) {
  auto const f = real<alloc_host_fn>(hook_id::h_cuMemAllocHost_v2);
  if (f == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!interposing_allocations_or_exit()) return f(pp, bytes);
  return serve_host_alloc(pp, bytes, 0, attribute("cuMemAllocHost"), [&] { return f(pp, bytes); });
}

GPUMEM_HOOK(CUresult, cuMemFreeHost, (void* p)) {
  auto const f = real<free_host_fn>(hook_id::h_cuMemFreeHost);
  if (f == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!active() || p == nullptr) return f(p);
  const char* entry = attribute("cuMemFreeHost");
  switch (host_free(p, entry)) {
    case host_free_result::freed: return CUDA_SUCCESS;
    case host_free_result::refused: return CUDA_ERROR_INVALID_VALUE;
    case host_free_result::not_ours: break;
  }
  CUresult const r = f(p);
  note_host_passthrough(false, p, 0, entry, r);
  return r;
}

GPUMEM_HOOK(CUresult, cuMemHostRegister_v2, (void* p, std::size_t bytes, unsigned int flags)) {
  auto const f = real<host_register_fn>(hook_id::h_cuMemHostRegister_v2);
  if (f == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!active()) return f(p, bytes, flags);
  CUresult const r = f(p, bytes, flags);
  note_host_passthrough(true, p, bytes, attribute("cuMemHostRegister"), r);
  return r;
}

GPUMEM_HOOK(CUresult, cuMemHostUnregister, (void* p)) {
  auto const f = real<host_unregister_fn>(hook_id::h_cuMemHostUnregister);
  if (f == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!active()) return f(p);
  CUresult const r = f(p);
  note_host_passthrough(false, p, 0, attribute("cuMemHostUnregister"), r);
  return r;
}

GPUMEM_HOOK(cudaError_t, cudaHostAlloc, (void** p, std::size_t n, unsigned int flags)) {
  return through_runtime<cudaError_t (*)(void**, std::size_t, unsigned int)>(hook_id::h_cudaHostAlloc, "cudaHostAlloc",
                                                                             p, n, flags);
}

GPUMEM_HOOK(cudaError_t, cudaMallocHost, (void** p, std::size_t n)) {
  return through_runtime<cudaError_t (*)(void**, std::size_t)>(hook_id::h_cudaMallocHost, "cudaMallocHost", p, n);
}

GPUMEM_HOOK(cudaError_t, cudaFreeHost, (void* p)) {
  return through_runtime<cudaError_t (*)(void*)>(hook_id::h_cudaFreeHost, "cudaFreeHost", p);
}

GPUMEM_HOOK(cudaError_t, cudaHostRegister, (void* p, std::size_t n, unsigned int flags)) {
  return through_runtime<cudaError_t (*)(void*, std::size_t, unsigned int)>(hook_id::h_cudaHostRegister,
                                                                            "cudaHostRegister", p, n, flags);
}

GPUMEM_HOOK(cudaError_t, cudaHostUnregister, (void* p)) {
  return through_runtime<cudaError_t (*)(void*)>(hook_id::h_cudaHostUnregister, "cudaHostUnregister", p);
}

}  // namespace gpumem::shim
