// Driver entry points: allocation, free, memory info and pointer queries,
// synchronizations and the default pool's trim and attributes (release.hpp). Each
// _ptsz variant is the same hook with stream 0 read as the per-thread stream (0x2).
// Pass-through (GPUMEM_DISABLE, on_error = passthrough) calls the real function
// straight away.

#include "hooks/hook_macros.hpp"
#include "hooks/hook_table.hpp"
#include "observe/event_log.hpp"
#include "serve/allocation_registry.hpp"
#include "serve/capture_guard.hpp"
#include "serve/created_memory.hpp"
#include "serve/device_chains.hpp"
#include "serve/ipc_policy.hpp"
#include "serve/ipc_sharing.hpp"
#include "serve/live_streams.hpp"
#include "serve/managed_memory.hpp"
#include "serve/mem_info.hpp"
#include "serve/own_context_memory.hpp"
#include "serve/release.hpp"
#include "serve/serve.hpp"
#include "shim_state.hpp"

#include <gpumem/device_memory_resource.hpp>

#include <cuda.h>

#include <cstdint>
#include <limits>

namespace gpumem::shim {
namespace {

using alloc_fn = CUresult (*)(CUdeviceptr*, std::size_t);
using free_fn = CUresult (*)(CUdeviceptr);
using alloc_async_fn = CUresult (*)(CUdeviceptr*, std::size_t, CUstream);
using free_async_fn = CUresult (*)(CUdeviceptr, CUstream);
using alloc_pool_fn = CUresult (*)(CUdeviceptr*, std::size_t, CUmemoryPool, CUstream);
using alloc_managed_fn = CUresult (*)(CUdeviceptr*, std::size_t, unsigned int);
using alloc_pitch_fn = CUresult (*)(CUdeviceptr*, std::size_t*, std::size_t, std::size_t, unsigned int);

constexpr std::size_t pitch_alignment = 512;  // what cuMemAllocPitch gives (docs/cuda-semantics.md)

void* as_ptr(CUdeviceptr d) noexcept { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(d)); }

CUresult not_loaded() noexcept { return CUDA_ERROR_NOT_INITIALIZED; }

// A request served by CUDA itself, counted and registered; in a context the program
// created, charged to the device's limit first (own_context_memory.hpp).
template <class Call>
CUresult pass_through_alloc(CUdeviceptr* dptr, std::size_t bytes, CUstream stream, alloc_kind kind, const char* entry,
                            Call&& call) noexcept {
  auto const start = event_clock();
  device_chain* charged = nullptr;
  if (kind == alloc_kind::passthrough) {
    bool refused = false;
    charged = charge_own_context(bytes, entry, refused);
    if (refused) {
      note_passthrough_allocation(nullptr, bytes, stream, kind, entry, CUDA_ERROR_OUT_OF_MEMORY, start);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  CUresult const r = call();
  if (!note_passthrough_allocation(r == CUDA_SUCCESS ? as_ptr(*dptr) : nullptr, bytes, stream, kind, entry, r, start,
                                   charged)) {
    uncharge_own_context(charged, bytes);  // no registration holds the charge
  }
  return r;
}

// Result of the enclosing runtime call's replay, if any (the runtime records it as
// its last error; the original failure was already counted and logged).
bool replay(CUresult& r) noexcept {
  r = take_forced_result();
  return r != CUDA_SUCCESS;
}

// The hook's id is a template argument: its real function's slot and whether it is
// a _ptsz entry point are constants.
template <hook_id real_id>
CUresult free_impl(CUdeviceptr dptr, CUstream stream, free_kind kind, const char* driver_entry) noexcept {
  bool const stream_ordered = kind == free_kind::async;
  auto const raw_stream = stream;
  if (!active()) {
    if (stream_ordered) {
      auto const f = real<free_async_fn>(real_id);
      return f != nullptr ? f(dptr, raw_stream) : not_loaded();
    }
    auto const f = real<free_fn>(real_id);
    return f != nullptr ? f(dptr) : not_loaded();
  }
  if (dptr == 0) return CUDA_SUCCESS;  // as CUDA: freeing null is a no-op
  if (CUresult forced{}; replay(forced)) return forced;
  const char* entry = attribute(driver_entry);
  if constexpr (per_thread_stream(real_id)) stream = ptsz_stream(stream);
  auto const o = free_registered(as_ptr(dptr), stream, kind, entry);
  if (o.handled) return o.result;
  auto const start = event_clock();
  CUresult r = not_loaded();
  if (stream_ordered) {
    if (auto const f = real<free_async_fn>(real_id)) r = f(dptr, raw_stream);
  } else if (auto const f = real<free_fn>(real_id)) {
    r = f(dptr);
  }
  settle_passthrough_free(as_ptr(dptr), o, r == CUDA_SUCCESS);
  note_passthrough_free(as_ptr(dptr), stream, entry, r, start);
  return r;
}

template <hook_id real_id>
CUresult alloc_async_impl(CUdeviceptr* dptr, std::size_t bytes, CUstream hstream, const char* driver_entry) noexcept {
  auto const f = real<alloc_async_fn>(real_id);
  if (!interposing_allocations_or_exit()) return f != nullptr ? f(dptr, bytes, hstream) : not_loaded();
  if (CUresult forced{}; replay(forced)) return forced;
  const char* entry = attribute(driver_entry);
  CUstream const s = per_thread_stream(real_id) ? ptsz_stream(hstream) : hstream;
  if (dptr == nullptr) {
    note_failed_allocation(bytes, s, entry, CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (bytes == 0) {
    *dptr = 0;
    return CUDA_SUCCESS;  // as CUDA (docs/cuda-semantics.md)
  }
  if (f == nullptr) return not_loaded();
  if (stream_capturing(s)) {
    // Graph memory: CUDA makes it a memory node of the graph being captured.
    return pass_through_alloc(dptr, bytes, s, alloc_kind::captured, entry, [&] { return f(dptr, bytes, hstream); });
  }
  stream_home home;
  if (check_stream(s, &home) != CUDA_SUCCESS) {
    // A destroyed or made-up stream: CUDA's answer (an error, counted and logged).
    return pass_through_alloc(dptr, bytes, s, alloc_kind::passthrough, entry, [&] { return f(dptr, bytes, hstream); });
  }
  void* p = nullptr;
  CUresult const r = chain_allocate(&p, bytes, s, alloc_kind::async, entry, driver_hook_level(), home);
  if (r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_NOT_SUPPORTED) {
    return pass_through_alloc(dptr, bytes, s, alloc_kind::passthrough, entry, [&] { return f(dptr, bytes, hstream); });
  }
  if (r == CUDA_SUCCESS) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return r;
}

template <hook_id real_id>
CUresult alloc_pool_impl(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool, CUstream hstream) noexcept {
  auto const f = real<alloc_pool_fn>(real_id);
  if (!interposing_allocations_or_exit() || pool == nullptr) {
    return f != nullptr ? f(dptr, bytes, pool, hstream) : not_loaded();  // null pool: CUDA's error
  }
  if (CUresult forced{}; replay(forced)) return forced;
  const char* entry = attribute("cuMemAllocFromPoolAsync");
  CUstream const s = per_thread_stream(real_id) ? ptsz_stream(hstream) : hstream;
  if (dptr == nullptr || f == nullptr) return f != nullptr ? f(dptr, bytes, pool, hstream) : not_loaded();
  if (bytes == 0) {
    *dptr = 0;
    return CUDA_SUCCESS;
  }
  auto call = [&] { return f(dptr, bytes, pool, hstream); };
  if (stream_capturing(s)) return pass_through_alloc(dptr, bytes, s, alloc_kind::captured, entry, call);
  if (check_stream(s) != CUDA_SUCCESS) return pass_through_alloc(dptr, bytes, s, alloc_kind::passthrough, entry, call);
  // The pool names the device (the current one's default pool), not the stream.
  if (!is_default_pool(pool)) return pass_through_alloc(dptr, bytes, s, alloc_kind::foreign_pool, entry, call);
  void* p = nullptr;
  CUresult const r = chain_allocate(&p, bytes, s, alloc_kind::async, entry, driver_hook_level());
  if (r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_NOT_SUPPORTED) {
    return pass_through_alloc(dptr, bytes, s, alloc_kind::passthrough, entry, call);
  }
  if (r == CUDA_SUCCESS) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return r;
}

// Whether this driver call is the program's own: not one a runtime hook made
// through the real runtime (that hook does the shim's part once, for both levels).
bool programs_own_call() noexcept { return current_runtime_call().entry == nullptr && active(); }

// A synchronization's result, after giving back what the release threshold lets go
// when it succeeded (release.hpp).
CUresult synchronized(CUresult r) noexcept {
  if (r == CUDA_SUCCESS && programs_own_call()) release_at_sync();
  return r;
}

using stream_sync_fn = CUresult (*)(CUstream);

}  // namespace
}  // namespace gpumem::shim

using namespace gpumem::shim;

GPUMEM_HOOK(CUresult, cuMemAlloc_v2, (CUdeviceptr * dptr, std::size_t bytes)) {
  auto const f = real<alloc_fn>(hook_id::h_cuMemAlloc_v2);
  if (!interposing_allocations_or_exit()) return f != nullptr ? f(dptr, bytes) : not_loaded();
  if (CUresult forced{}; replay(forced)) return forced;
  const char* entry = attribute("cuMemAlloc");
  if (dptr == nullptr || bytes == 0) {
    note_failed_allocation(bytes, nullptr, entry, CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* p = nullptr;
  CUresult const r = chain_allocate(&p, bytes, nullptr, alloc_kind::sync, entry, driver_hook_level());
  if (r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_NOT_SUPPORTED) {
    if (f == nullptr) return not_loaded();
    return pass_through_alloc(dptr, bytes, nullptr, alloc_kind::passthrough, entry, [&] { return f(dptr, bytes); });
  }
  if (r == CUDA_SUCCESS) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return r;
}

GPUMEM_HOOK(CUresult, cuMemFree_v2, (CUdeviceptr dptr)) {
  return free_impl<hook_id::h_cuMemFree_v2>(dptr, nullptr, free_kind::sync, "cuMemFree");
}

GPUMEM_HOOK(CUresult, cuMemAllocAsync, (CUdeviceptr * dptr, std::size_t bytes, CUstream s)) {
  return alloc_async_impl<hook_id::h_cuMemAllocAsync>(dptr, bytes, s, "cuMemAllocAsync");
}
GPUMEM_HOOK(CUresult, cuMemAllocAsync_ptsz, (CUdeviceptr * dptr, std::size_t bytes, CUstream s)) {
  return alloc_async_impl<hook_id::h_cuMemAllocAsync_ptsz>(dptr, bytes, s, "cuMemAllocAsync");
}
GPUMEM_HOOK(CUresult, cuMemFreeAsync, (CUdeviceptr dptr, CUstream s)) {
  return free_impl<hook_id::h_cuMemFreeAsync>(dptr, s, free_kind::async, "cuMemFreeAsync");
}
GPUMEM_HOOK(CUresult, cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream s)) {
  return free_impl<hook_id::h_cuMemFreeAsync_ptsz>(dptr, s, free_kind::async, "cuMemFreeAsync");
}
GPUMEM_HOOK(CUresult, cuMemAllocFromPoolAsync, (CUdeviceptr * dptr, std::size_t bytes, CUmemoryPool pool, CUstream s)) {
  return alloc_pool_impl<hook_id::h_cuMemAllocFromPoolAsync>(dptr, bytes, pool, s);
}
GPUMEM_HOOK(CUresult, cuMemAllocFromPoolAsync_ptsz,
            (CUdeviceptr * dptr, std::size_t bytes, CUmemoryPool pool, CUstream s)) {
  return alloc_pool_impl<hook_id::h_cuMemAllocFromPoolAsync_ptsz>(dptr, bytes, pool, s);
}

GPUMEM_HOOK(CUresult, cuMemAllocManaged, (CUdeviceptr * dptr, std::size_t bytes, unsigned int flags)) {
  // The managed chain's (managed_memory.hpp); what it leaves to CUDA is registered,
  // so every free path finds its way back.
  auto const f = real<alloc_managed_fn>(hook_id::h_cuMemAllocManaged);
  if (f == nullptr) return not_loaded();
  if (!interposing_allocations_or_exit()) return f(dptr, bytes, flags);
  if (CUresult forced{}; replay(forced)) return forced;
  const char* entry = attribute("cuMemAllocManaged");
  if (CUresult const r = managed_allocate(dptr, bytes, flags, entry); r != CUDA_ERROR_NOT_SUPPORTED) return r;
  return pass_through_alloc(dptr, bytes, nullptr, alloc_kind::managed, entry, [&] { return f(dptr, bytes, flags); });
}

// Physical memory the program maps itself (created_memory.hpp): not pooled, but
// limited, counted and logged.
GPUMEM_HOOK(CUresult, cuMemCreate,
            (CUmemGenericAllocationHandle * handle, std::size_t bytes, CUmemAllocationProp const* prop,
             unsigned long long flags)) {
  return create_tracked(handle, bytes, prop, flags);
}
GPUMEM_HOOK(CUresult, cuMemRelease, (CUmemGenericAllocationHandle handle)) { return release_tracked(handle); }
GPUMEM_HOOK(CUresult, cuMemMap,
            (CUdeviceptr ptr, std::size_t size, std::size_t offset, CUmemGenericAllocationHandle handle,
             unsigned long long flags)) {
  return map_tracked(ptr, size, offset, handle, flags);
}
GPUMEM_HOOK(CUresult, cuMemUnmap, (CUdeviceptr ptr, std::size_t size)) { return unmap_tracked(ptr, size); }

GPUMEM_HOOK(CUresult, cuMemAllocPitch_v2,
            (CUdeviceptr * dptr, std::size_t* pitch, std::size_t width, std::size_t height, unsigned int elem)) {
  auto const f = real<alloc_pitch_fn>(hook_id::h_cuMemAllocPitch_v2);
  if (!interposing_allocations_or_exit()) return f != nullptr ? f(dptr, pitch, width, height, elem) : not_loaded();
  if (CUresult forced{}; replay(forced)) return forced;
  const char* entry = attribute("cuMemAllocPitch");
  if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16)) {
    note_failed_allocation(width * height, nullptr, entry, CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::size_t const row = gpumem::align_up(width, pitch_alignment);
  if (row < width || height > std::numeric_limits<std::size_t>::max() / row) {
    note_failed_allocation(std::numeric_limits<std::size_t>::max(), nullptr, entry, CUDA_ERROR_OUT_OF_MEMORY);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* p = nullptr;
  CUresult const r = chain_allocate(&p, row * height, nullptr, alloc_kind::pitch, entry, driver_hook_level());
  if (r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_NOT_SUPPORTED) {
    if (f == nullptr) return not_loaded();
    return pass_through_alloc(dptr, row * height, nullptr, alloc_kind::passthrough, entry,
                              [&] { return f(dptr, pitch, width, height, elem); });
  }
  if (r == CUDA_SUCCESS) {
    *dptr = reinterpret_cast<CUdeviceptr>(p);
    *pitch = row;
  }
  return r;
}

GPUMEM_HOOK(CUresult, cuMemGetInfo_v2, (std::size_t * free_bytes, std::size_t* total_bytes)) {
  using fn = CUresult (*)(std::size_t*, std::size_t*);
  auto const f = real<fn>(hook_id::h_cuMemGetInfo_v2);
  CUcontext ctx = nullptr;
  if (!active() || current_device(ctx) < 0) return f != nullptr ? f(free_bytes, total_bytes) : not_loaded();
  return pool_mem_info(free_bytes, total_bytes);
}

GPUMEM_HOOK(CUresult, cuMemGetAddressRange_v2, (CUdeviceptr * base, std::size_t* size, CUdeviceptr dptr)) {
  using fn = CUresult (*)(CUdeviceptr*, std::size_t*, CUdeviceptr);
  if (active()) {
    // A pooled pointer: the allocation, not the pool's slab.
    if (auto const hit = registry().find_containing(static_cast<std::uintptr_t>(dptr));
        hit && served_by_gpumem(hit->second.kind)) {
      if (base != nullptr) *base = static_cast<CUdeviceptr>(hit->first);
      if (size != nullptr) *size = hit->second.bytes;
      return CUDA_SUCCESS;
    }
  }
  auto const f = real<fn>(hook_id::h_cuMemGetAddressRange_v2);
  return f != nullptr ? f(base, size, dptr) : not_loaded();
}

GPUMEM_HOOK(CUresult, cuPointerGetAttribute, (void* data, CUpointer_attribute attribute, CUdeviceptr ptr)) {
  using fn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  if (active() && data != nullptr &&
      (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR || attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE)) {
    if (auto const hit = registry().find_containing(static_cast<std::uintptr_t>(ptr));
        hit && served_by_gpumem(hit->second.kind)) {
      if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
        *static_cast<CUdeviceptr*>(data) = static_cast<CUdeviceptr>(hit->first);
      } else {
        *static_cast<std::size_t*>(data) = hit->second.bytes;
      }
      return CUDA_SUCCESS;
    }
  }
  auto const f = real<fn>(hook_id::h_cuPointerGetAttribute);
  return f != nullptr ? f(data, attribute, ptr) : not_loaded();
}

GPUMEM_HOOK(CUresult, cuPointerGetAttributes,
            (unsigned int count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr)) {
  using fn = CUresult (*)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);
  auto const f = real<fn>(hook_id::h_cuPointerGetAttributes);
  if (f == nullptr) return not_loaded();
  CUresult const r = f(count, attributes, data, ptr);
  if (r != CUDA_SUCCESS || !active() || attributes == nullptr || data == nullptr) return r;
  auto const hit = registry().find_containing(static_cast<std::uintptr_t>(ptr));
  if (!hit || !served_by_gpumem(hit->second.kind)) return r;
  for (unsigned int i = 0; i < count; ++i) {
    if (data[i] == nullptr) continue;
    if (attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
      *static_cast<CUdeviceptr*>(data[i]) = static_cast<CUdeviceptr>(hit->first);
    } else if (attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
      *static_cast<std::size_t*>(data[i]) = hit->second.bytes;
    }
  }
  return r;
}

// IPC: pooled memory is shared by gpumem's own handles (ipc_sharing.hpp); CUDA's
// memory and CUDA's handles stay CUDA's.
GPUMEM_HOOK(CUresult, cuIpcGetMemHandle, (CUipcMemHandle * handle, CUdeviceptr dptr)) {
  using fn = CUresult (*)(CUipcMemHandle*, CUdeviceptr);
  if (active()) {
    void* const p = reinterpret_cast<void*>(static_cast<std::uintptr_t>(dptr));
    if (CUresult const r = ipc_export(p, handle, attribute("cuIpcGetMemHandle")); r != CUDA_ERROR_NOT_SUPPORTED)
      return r;
    if (!ipc_allowed(p, attribute("cuIpcGetMemHandle"))) return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto const f = real<fn>(hook_id::h_cuIpcGetMemHandle);
  return f != nullptr ? f(handle, dptr) : not_loaded();
}
GPUMEM_HOOK(CUresult, cuIpcOpenMemHandle_v2, (CUdeviceptr * dptr, CUipcMemHandle handle, unsigned int flags)) {
  using fn = CUresult (*)(CUdeviceptr*, CUipcMemHandle, unsigned int);
  if (CUresult const r = ipc_open(dptr, handle, flags, attribute("cuIpcOpenMemHandle")); r != CUDA_ERROR_NOT_SUPPORTED)
    return r;
  auto const f = real<fn>(hook_id::h_cuIpcOpenMemHandle_v2);
  return f != nullptr ? f(dptr, handle, flags) : not_loaded();
}
GPUMEM_HOOK(CUresult, cuIpcCloseMemHandle, (CUdeviceptr dptr)) {
  using fn = CUresult (*)(CUdeviceptr);
  if (CUresult const r = ipc_close(dptr, attribute("cuIpcCloseMemHandle")); r != CUDA_ERROR_NOT_SUPPORTED) return r;
  auto const f = real<fn>(hook_id::h_cuIpcCloseMemHandle);
  return f != nullptr ? f(dptr) : not_loaded();
}

// Synchronizations: CUDA's answer, then the release threshold (release.hpp). The
// shim never calls these itself (its own waits go through detail::driver()).
GPUMEM_HOOK(CUresult, cuCtxSynchronize, ()) {
  auto const f = real<CUresult (*)()>(hook_id::h_cuCtxSynchronize);
  return f != nullptr ? synchronized(f()) : not_loaded();
}
GPUMEM_HOOK(CUresult, cuCtxSynchronize_v2, (CUcontext ctx)) {
  auto const f = real<CUresult (*)(CUcontext)>(hook_id::h_cuCtxSynchronize_v2);
  return f != nullptr ? synchronized(f(ctx)) : not_loaded();
}
GPUMEM_HOOK(CUresult, cuStreamSynchronize, (CUstream s)) {
  auto const f = real<stream_sync_fn>(hook_id::h_cuStreamSynchronize);
  return f != nullptr ? synchronized(f(s)) : not_loaded();
}
GPUMEM_HOOK(CUresult, cuStreamSynchronize_ptsz, (CUstream s)) {
  auto const f = real<stream_sync_fn>(hook_id::h_cuStreamSynchronize_ptsz);
  return f != nullptr ? synchronized(f(s)) : not_loaded();
}
GPUMEM_HOOK(CUresult, cuEventSynchronize, (CUevent e)) {
  auto const f = real<CUresult (*)(CUevent)>(hook_id::h_cuEventSynchronize);
  return f != nullptr ? synchronized(f(e)) : not_loaded();
}

// The default pool of a device gpumem serves: its chain holds the memory CUDA's
// pool would have held, so it is trimmed and counted with it. Other pools pass.
GPUMEM_HOOK(CUresult, cuMemPoolTrimTo, (CUmemoryPool pool, std::size_t keep)) {
  auto const f = real<CUresult (*)(CUmemoryPool, std::size_t)>(hook_id::h_cuMemPoolTrimTo);
  if (f == nullptr) return not_loaded();
  if (programs_own_call()) trim_default_pool(pool, keep, "cuMemPoolTrimTo");
  return f(pool, keep);  // CUDA's pool may hold memory of its own
}
GPUMEM_HOOK(CUresult, cuMemPoolGetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void* value)) {
  auto const f = real<CUresult (*)(CUmemoryPool, CUmemPool_attribute, void*)>(hook_id::h_cuMemPoolGetAttribute);
  if (f == nullptr) return not_loaded();
  CUresult const r = f(pool, attr, value);  // CUDA checks the arguments and adds its own pool's part
  if (r == CUDA_SUCCESS && programs_own_call()) add_pool_attribute(pool, attr, value);
  return r;
}
GPUMEM_HOOK(CUresult, cuMemPoolSetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void* value)) {
  auto const f = real<CUresult (*)(CUmemoryPool, CUmemPool_attribute, void*)>(hook_id::h_cuMemPoolSetAttribute);
  if (f == nullptr) return not_loaded();
  CUresult const r = f(pool, attr, value);  // CUDA refuses what it refuses (a high reset to other than 0)
  if (r == CUDA_SUCCESS && programs_own_call()) note_pool_attribute_set(pool, attr, value);
  return r;
}
