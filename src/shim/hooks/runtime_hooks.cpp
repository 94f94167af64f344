// Runtime entry points of a shared libcudart. Served here when a context is
// current (no runtime involvement: one chain call); otherwise handed to the real
// runtime under scoped_runtime_call, so the driver hook it calls serves the request
// once and attributes it to the runtime entry point, and the runtime keeps its own
// bookkeeping (context creation, last error).

#include "hooks/hook_macros.hpp"
#include "hooks/hook_table.hpp"
#include "observe/event_log.hpp"
#include "serve/allocation_registry.hpp"
#include "serve/capture_guard.hpp"
#include "serve/device_chains.hpp"
#include "serve/ipc_policy.hpp"
#include "serve/ipc_sharing.hpp"
#include "serve/live_streams.hpp"
#include "serve/mem_info.hpp"
#include "serve/notifications.hpp"
#include "serve/release.hpp"
#include "serve/serve.hpp"
#include "shim_state.hpp"

#include <gpumem/device_memory_resource.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>

namespace gpumem::shim {
namespace {

using malloc_fn = cudaError_t (*)(void**, std::size_t);
using free_fn = cudaError_t (*)(void*);
using malloc_async_fn = cudaError_t (*)(void**, std::size_t, cudaStream_t);
using free_async_fn = cudaError_t (*)(void*, cudaStream_t);
using malloc_pool_fn = cudaError_t (*)(void**, std::size_t, cudaMemPool_t, cudaStream_t);

constexpr std::size_t pitch_alignment = 512;

// No libcudart found behind our export (cannot happen for a program that linked it).
constexpr cudaError_t no_runtime = cudaErrorInitializationError;

// The chain could not serve (`r`): let the runtime run the request. A real failure
// is replayed through the driver hook so the runtime records its last error.
template <class Call>
cudaError_t delegate(const char* entry, CUresult r, Call&& call) noexcept {
  CUresult const forced = (r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_NOT_SUPPORTED) ? CUDA_SUCCESS : r;
  scoped_runtime_call marker{entry, forced};
  return call();
}

// The runtime's spelling of a driver result the shim answers with itself.
cudaError_t runtime_error(CUresult r) noexcept {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return cudaErrorStreamCaptureUnsupported;
    default: return cudaErrorUnknown;
  }
}

// A host address, which no device allocation can have (unified addressing keeps
// them apart): what a replayed failure hands the runtime instead of the program's
// pointer, so that nothing of the program's could be freed even if a runtime
// bypassed the driver hook.
char const replay_target = 0;
void* replay_pointer() noexcept { return const_cast<char*>(&replay_target); }

// A failure CUDA would have answered the same way (a double free, a free CUDA
// refuses during a capture) that the shim answered itself, replayed through the
// runtime so that it records it as its last error, as it records its own: the
// runtime's driver call returns `r` (the driver hook's replay). `replay` makes
// that runtime call with replay_pointer() (null: no runtime to tell); the answer
// is `r`'s spelling either way.
template <class Fn, class... Args>
cudaError_t answered(const char* entry, CUresult r, Fn replay, Args... args) noexcept {
  if (r != CUDA_SUCCESS && replay != nullptr) {
    scoped_runtime_call marker{entry, r};
    (void)replay(replay_pointer(), args...);
  }
  return runtime_error(r);
}

// Registers what the runtime allocated when it did so without our driver hook
// seeing it (insert_if_absent: counted once either way).
void after_runtime_alloc(cudaError_t e, void* p, std::size_t bytes, CUstream s, alloc_kind kind, const char* entry,
                         event_start start) noexcept {
  if (e == cudaSuccess && p != nullptr) note_passthrough_allocation(p, bytes, s, kind, entry, CUDA_SUCCESS, start);
}

// The hook's id is a template argument: its real function's slot and whether it is
// a _ptsz entry point are constants.
template <hook_id id>
cudaError_t malloc_async_impl(void** p, std::size_t n, cudaStream_t s, const char* entry) noexcept {
  auto const f = real<malloc_async_fn>(id);
  if (!interposing_allocations_or_exit()) return f != nullptr ? f(p, n, s) : no_runtime;
  if (f == nullptr) return no_runtime;
  if (p == nullptr) return delegate(entry, CUDA_SUCCESS, [&] { return f(p, n, s); });
  if (n == 0) {
    *p = nullptr;
    return cudaSuccess;
  }
  CUstream const cs = per_thread_stream(id) ? ptsz_stream(s) : s;
  if (stream_capturing(cs)) {
    auto const start = event_clock();
    cudaError_t const e = delegate(entry, CUDA_SUCCESS, [&] { return f(p, n, s); });
    after_runtime_alloc(e, *p, n, cs, alloc_kind::captured, entry, start);
    return e;
  }
  // A destroyed or made-up stream: CUDA answers (and records its last error).
  stream_home home;
  if (check_stream(cs, &home) != CUDA_SUCCESS) return delegate(entry, CUDA_SUCCESS, [&] { return f(p, n, s); });
  void* q = nullptr;
  CUresult const r = chain_allocate(&q, n, cs, alloc_kind::async, entry, entry_level::runtime, home);
  if (r == CUDA_SUCCESS) {
    *p = q;
    return cudaSuccess;
  }
  return delegate(entry, r, [&] { return f(p, n, s); });
}

template <hook_id id>
cudaError_t free_async_impl(void* p, cudaStream_t s, const char* entry) noexcept {
  auto const f = real<free_async_fn>(id);
  if (!active() || p == nullptr) return f != nullptr ? f(p, s) : no_runtime;
  CUstream const cs = per_thread_stream(id) ? ptsz_stream(s) : s;
  auto const o = free_registered(p, cs, free_kind::async, entry);
  if (o.handled) return answered(entry, o.result, f, s);
  if (f == nullptr) return no_runtime;
  scoped_runtime_call marker{entry};
  cudaError_t const e = f(p, s);
  settle_passthrough_free(p, o, e == cudaSuccess);
  return e;
}

template <hook_id id>
cudaError_t malloc_pool_impl(void** p, std::size_t n, cudaMemPool_t pool, cudaStream_t s) noexcept {
  const char* entry = "cudaMallocFromPoolAsync";
  auto const f = real<malloc_pool_fn>(id);
  if (f == nullptr) return no_runtime;
  if (!interposing_allocations_or_exit() || p == nullptr || pool == nullptr) {
    scoped_runtime_call marker{entry};
    return f(p, n, pool, s);
  }
  if (n == 0) {
    *p = nullptr;
    return cudaSuccess;
  }
  CUstream const cs = per_thread_stream(id) ? ptsz_stream(s) : s;
  auto const pass = [&](alloc_kind kind) {
    auto const start = event_clock();
    cudaError_t const e = delegate(entry, CUDA_SUCCESS, [&] { return f(p, n, pool, s); });
    after_runtime_alloc(e, *p, n, cs, kind, entry, start);
    return e;
  };
  if (stream_capturing(cs)) return pass(alloc_kind::captured);
  if (check_stream(cs) != CUDA_SUCCESS) return delegate(entry, CUDA_SUCCESS, [&] { return f(p, n, pool, s); });
  // The pool names the device (the current one's default pool), not the stream.
  if (!is_default_pool(reinterpret_cast<CUmemoryPool>(pool))) return pass(alloc_kind::foreign_pool);
  void* q = nullptr;
  CUresult const r = chain_allocate(&q, n, cs, alloc_kind::async, entry, entry_level::runtime);
  if (r == CUDA_SUCCESS) {
    *p = q;
    return cudaSuccess;
  }
  return delegate(entry, r, [&] { return f(p, n, pool, s); });
}

// The runtime's answer to a call with a part of the shim's (a synchronization, a
// default pool's trim or attribute), the real runtime marked so that the driver
// hook it reaches leaves that part to this hook. Only the outermost hook does it: a
// runtime whose entry points call one another through their exported names (the
// _ptsz twins) reaches this hook twice.
template <class Call, class Then>
cudaError_t with_shims_part(const char* entry, Call&& call, Then&& then) noexcept {
  bool const outermost = current_runtime_call().entry == nullptr;
  cudaError_t e = cudaSuccess;
  {
    scoped_runtime_call marker{entry};
    e = call();
  }
  if (e == cudaSuccess && outermost && active()) then();
  return e;
}

template <class Call>
cudaError_t synchronize(const char* entry, Call&& call) noexcept {
  return with_shims_part(entry, call, [] { release_at_sync(); });
}

using stream_sync_fn = cudaError_t (*)(cudaStream_t);
using pool_attribute_fn = cudaError_t (*)(cudaMemPool_t, cudaMemPoolAttr, void*);

// The runtime's pool attributes are the driver's, number for number.
static_assert(static_cast<int>(cudaMemPoolAttrReleaseThreshold) == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD);
static_assert(static_cast<int>(cudaMemPoolAttrReservedMemCurrent) == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
static_assert(static_cast<int>(cudaMemPoolAttrReservedMemHigh) == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH);
static_assert(static_cast<int>(cudaMemPoolAttrUsedMemCurrent) == CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
static_assert(static_cast<int>(cudaMemPoolAttrUsedMemHigh) == CU_MEMPOOL_ATTR_USED_MEM_HIGH);
CUmemPool_attribute driver_attribute(cudaMemPoolAttr a) noexcept { return static_cast<CUmemPool_attribute>(a); }

}  // namespace
}  // namespace gpumem::shim

using namespace gpumem::shim;

GPUMEM_HOOK(cudaError_t, cudaMalloc, (void** p, std::size_t n)) {
  auto const f = real<malloc_fn>(hook_id::h_cudaMalloc);
  if (!interposing_allocations_or_exit()) return f != nullptr ? f(p, n) : no_runtime;
  if (p != nullptr && n == 0) {
    *p = nullptr;  // as CUDA: success and NULL
    return cudaSuccess;
  }
  CUresult r = CUDA_ERROR_INVALID_VALUE;  // NULL out-pointer: the runtime says so itself
  if (p != nullptr) {
    void* q = nullptr;
    r = chain_allocate(&q, n, nullptr, alloc_kind::sync, "cudaMalloc", entry_level::runtime);
    if (r == CUDA_SUCCESS) {
      *p = q;
      return cudaSuccess;
    }
  }
  if (f == nullptr) return no_runtime;
  return delegate("cudaMalloc", p == nullptr ? CUDA_SUCCESS : r, [&] { return f(p, n); });
}

GPUMEM_HOOK(cudaError_t, cudaFree, (void* p)) {
  auto const f = real<free_fn>(hook_id::h_cudaFree);
  // cudaFree(NULL) is the idiom that creates the context: the runtime's business.
  if (!active() || p == nullptr) return f != nullptr ? f(p) : no_runtime;
  auto const o = free_registered(p, nullptr, free_kind::sync, "cudaFree");
  // A refused double free is answered here: handing a pool pointer to the real
  // runtime could free the pool's slab.
  if (o.handled) return answered("cudaFree", o.result, f);
  if (f == nullptr) return no_runtime;
  scoped_runtime_call marker{"cudaFree"};
  cudaError_t const e = f(p);
  settle_passthrough_free(p, o, e == cudaSuccess);
  return e;
}

GPUMEM_HOOK(cudaError_t, cudaMallocAsync, (void** p, std::size_t n, cudaStream_t s)) {
  return malloc_async_impl<hook_id::h_cudaMallocAsync>(p, n, s, "cudaMallocAsync");
}
GPUMEM_HOOK(cudaError_t, cudaMallocAsync_ptsz, (void** p, std::size_t n, cudaStream_t s)) {
  return malloc_async_impl<hook_id::h_cudaMallocAsync_ptsz>(p, n, s, "cudaMallocAsync");
}
GPUMEM_HOOK(cudaError_t, cudaFreeAsync, (void* p, cudaStream_t s)) {
  return free_async_impl<hook_id::h_cudaFreeAsync>(p, s, "cudaFreeAsync");
}
GPUMEM_HOOK(cudaError_t, cudaFreeAsync_ptsz, (void* p, cudaStream_t s)) {
  return free_async_impl<hook_id::h_cudaFreeAsync_ptsz>(p, s, "cudaFreeAsync");
}
GPUMEM_HOOK(cudaError_t, cudaMallocFromPoolAsync, (void** p, std::size_t n, cudaMemPool_t pool, cudaStream_t s)) {
  return malloc_pool_impl<hook_id::h_cudaMallocFromPoolAsync>(p, n, pool, s);
}
GPUMEM_HOOK(cudaError_t, cudaMallocFromPoolAsync_ptsz, (void** p, std::size_t n, cudaMemPool_t pool, cudaStream_t s)) {
  return malloc_pool_impl<hook_id::h_cudaMallocFromPoolAsync_ptsz>(p, n, pool, s);
}

GPUMEM_HOOK(cudaError_t, cudaMallocManaged, (void** p, std::size_t n, unsigned int flags)) {
  using fn = cudaError_t (*)(void**, std::size_t, unsigned int);
  auto const f = real<fn>(hook_id::h_cudaMallocManaged);
  if (f == nullptr) return no_runtime;
  if (!interposing_allocations_or_exit()) return f(p, n, flags);
  auto const start = event_clock();
  cudaError_t const e = delegate("cudaMallocManaged", CUDA_SUCCESS, [&] { return f(p, n, flags); });
  if (p != nullptr) after_runtime_alloc(e, *p, n, nullptr, alloc_kind::managed, "cudaMallocManaged", start);
  return e;
}

GPUMEM_HOOK(cudaError_t, cudaMallocPitch, (void** p, std::size_t* pitch, std::size_t width, std::size_t height)) {
  using fn = cudaError_t (*)(void**, std::size_t*, std::size_t, std::size_t);
  auto const f = real<fn>(hook_id::h_cudaMallocPitch);
  if (f == nullptr) return no_runtime;
  if (!interposing_allocations_or_exit()) return f(p, pitch, width, height);
  // Odd shapes and bad pointers: the runtime's own answers.
  if (p == nullptr || pitch == nullptr || width == 0 || height == 0) {
    return delegate("cudaMallocPitch", CUDA_SUCCESS, [&] { return f(p, pitch, width, height); });
  }
  std::size_t const row = gpumem::align_up(width, pitch_alignment);
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  if (row >= width && height <= std::numeric_limits<std::size_t>::max() / row) {
    void* q = nullptr;
    r = chain_allocate(&q, row * height, nullptr, alloc_kind::pitch, "cudaMallocPitch", entry_level::runtime);
    if (r == CUDA_SUCCESS) {
      *p = q;
      *pitch = row;
      return cudaSuccess;
    }
  }
  return delegate("cudaMallocPitch", r, [&] { return f(p, pitch, width, height); });
}

GPUMEM_HOOK(cudaError_t, cudaMemGetInfo, (std::size_t * free_bytes, std::size_t* total_bytes)) {
  using fn = cudaError_t (*)(std::size_t*, std::size_t*);
  auto const f = real<fn>(hook_id::h_cudaMemGetInfo);
  CUcontext ctx = nullptr;
  if (active() && current_device(ctx) >= 0 && pool_mem_info(free_bytes, total_bytes) == CUDA_SUCCESS) {
    return cudaSuccess;
  }
  if (f == nullptr) return no_runtime;
  scoped_runtime_call marker{"cudaMemGetInfo"};  // its cuMemGetInfo reaches our hook
  return f(free_bytes, total_bytes);
}

GPUMEM_HOOK(cudaError_t, cudaPointerGetAttributes, (cudaPointerAttributes * attributes, const void* ptr)) {
  // CUDA's answer is right for pool memory (device memory of the slab's device); the
  // device of a registered pointer is ours to vouch for.
  using fn = cudaError_t (*)(cudaPointerAttributes*, const void*);
  auto const f = real<fn>(hook_id::h_cudaPointerGetAttributes);
  if (f == nullptr) return no_runtime;
  cudaError_t const e = f(attributes, ptr);
  if (e == cudaSuccess && attributes != nullptr && active()) {
    if (auto const hit = registry().find_containing(reinterpret_cast<std::uintptr_t>(ptr));
        hit && from_chain(hit->second.kind)) {
      attributes->device = hit->second.device;
    }
  }
  return e;
}

GPUMEM_HOOK(cudaError_t, cudaStreamDestroy, (cudaStream_t s)) {
  using fn = cudaError_t (*)(cudaStream_t);
  auto const f = real<fn>(hook_id::h_cudaStreamDestroy);
  if (active()) notify_stream_destroyed(s);
  return f != nullptr ? f(s) : no_runtime;
}

GPUMEM_HOOK(cudaError_t, cudaDeviceReset, ()) {
  using fn = cudaError_t (*)();
  auto const f = real<fn>(hook_id::h_cudaDeviceReset);
  CUcontext ctx = nullptr;
  if (active()) forget_device(current_device(ctx), "cudaDeviceReset");
  return f != nullptr ? f() : no_runtime;
}

// Pooled memory is shared by gpumem's own handle (ipc_sharing.hpp), or refused
// before the runtime (no last error) where its pages cannot be shared.
GPUMEM_HOOK(cudaError_t, cudaIpcGetMemHandle, (cudaIpcMemHandle_t * handle, void* p)) {
  using fn = cudaError_t (*)(cudaIpcMemHandle_t*, void*);
  if (active()) {
    static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle));
    if (CUresult const r = ipc_export(p, reinterpret_cast<CUipcMemHandle*>(handle), "cudaIpcGetMemHandle");
        r != CUDA_ERROR_NOT_SUPPORTED)
      return runtime_error(r);
    if (!ipc_allowed(p, "cudaIpcGetMemHandle")) return cudaErrorNotSupported;
  }
  auto const f = real<fn>(hook_id::h_cudaIpcGetMemHandle);
  if (f == nullptr) return no_runtime;
  scoped_runtime_call marker{"cudaIpcGetMemHandle"};
  return f(handle, p);
}

// Synchronizations: the runtime's answer, then the release threshold (release.hpp).
GPUMEM_HOOK(cudaError_t, cudaDeviceSynchronize, ()) {
  auto const f = real<cudaError_t (*)()>(hook_id::h_cudaDeviceSynchronize);
  if (f == nullptr) return no_runtime;
  return synchronize("cudaDeviceSynchronize", [&] { return f(); });
}
GPUMEM_HOOK(cudaError_t, cudaStreamSynchronize, (cudaStream_t s)) {
  auto const f = real<stream_sync_fn>(hook_id::h_cudaStreamSynchronize);
  if (f == nullptr) return no_runtime;
  return synchronize("cudaStreamSynchronize", [&] { return f(s); });
}
GPUMEM_HOOK(cudaError_t, cudaStreamSynchronize_ptsz, (cudaStream_t s)) {
  auto const f = real<stream_sync_fn>(hook_id::h_cudaStreamSynchronize_ptsz);
  if (f == nullptr) return no_runtime;
  return synchronize("cudaStreamSynchronize", [&] { return f(s); });
}
GPUMEM_HOOK(cudaError_t, cudaEventSynchronize, (cudaEvent_t e)) {
  auto const f = real<cudaError_t (*)(cudaEvent_t)>(hook_id::h_cudaEventSynchronize);
  if (f == nullptr) return no_runtime;
  return synchronize("cudaEventSynchronize", [&] { return f(e); });
}

// The default pool of a device gpumem serves (release.hpp); other pools pass.
GPUMEM_HOOK(cudaError_t, cudaMemPoolTrimTo, (cudaMemPool_t pool, std::size_t keep)) {
  auto const f = real<cudaError_t (*)(cudaMemPool_t, std::size_t)>(hook_id::h_cudaMemPoolTrimTo);
  if (f == nullptr) return no_runtime;
  // The chain first, then CUDA's pool (it may hold memory of its own).
  if (current_runtime_call().entry == nullptr && active()) {
    trim_default_pool(reinterpret_cast<CUmemoryPool>(pool), keep, "cudaMemPoolTrimTo");
  }
  scoped_runtime_call marker{"cudaMemPoolTrimTo"};
  return f(pool, keep);
}
GPUMEM_HOOK(cudaError_t, cudaMemPoolGetAttribute, (cudaMemPool_t pool, cudaMemPoolAttr attr, void* value)) {
  auto const f = real<pool_attribute_fn>(hook_id::h_cudaMemPoolGetAttribute);
  if (f == nullptr) return no_runtime;
  return with_shims_part(
      "cudaMemPoolGetAttribute", [&] { return f(pool, attr, value); },
      [&] { add_pool_attribute(reinterpret_cast<CUmemoryPool>(pool), driver_attribute(attr), value); });
}
GPUMEM_HOOK(cudaError_t, cudaMemPoolSetAttribute, (cudaMemPool_t pool, cudaMemPoolAttr attr, void* value)) {
  auto const f = real<pool_attribute_fn>(hook_id::h_cudaMemPoolSetAttribute);
  if (f == nullptr) return no_runtime;
  return with_shims_part(
      "cudaMemPoolSetAttribute", [&] { return f(pool, attr, value); },
      [&] { note_pool_attribute_set(reinterpret_cast<CUmemoryPool>(pool), driver_attribute(attr), value); });
}
