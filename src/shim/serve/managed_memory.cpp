#include "serve/managed_memory.hpp"

#include "serve/capture_guard.hpp"
#include "serve/device_chains.hpp"
#include "serve/process_chains.hpp"
#include "shim_state.hpp"

#include <gpumem/managed_memory_resource.hpp>

#include <cstdint>
#include <new>

namespace gpumem::shim {

CUresult managed_allocate(CUdeviceptr* dptr, std::size_t bytes, unsigned flags, const char* entry) noexcept {
  if (dptr == nullptr || bytes == 0 || !managed_attach_flag(flags)) return CUDA_ERROR_NOT_SUPPORTED;
  CUcontext ctx = nullptr;
  int const device = current_device(ctx);
  if (device < 0 || capture_may_refuse_unsafe_calls()) return CUDA_ERROR_NOT_SUPPORTED;
  auto const start = event_clock();
  void* p = nullptr;
  CUresult r = process_allocate(process_memory::managed, &p, bytes, flags, device, entry);
  if (r == CUDA_ERROR_NOT_SUPPORTED) return r;
  if (r == CUDA_SUCCESS) {
    try {
      registry().insert(reinterpret_cast<std::uintptr_t>(p),
                        allocation{bytes, nullptr, nullptr, device, alloc_kind::managed_chain, entry});
    } catch (std::bad_alloc const&) {
      process_deallocate(process_memory::managed, p, bytes, entry);
      r = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (r != CUDA_SUCCESS) {
    state().stats.failed_allocations.add();
    log_process_event(process_memory::managed, log_action::allocate_failure, nullptr, bytes, nullptr, device, entry, r,
                      start);
    return r;
  }
  *dptr = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
  message(level::trace, "%s: %zu bytes, attach %#x, from the managed chain: %p", entry, bytes, flags, p);
  log_process_event(process_memory::managed, log_action::allocate, p, bytes, nullptr, device, entry, CUDA_SUCCESS,
                    start);
  return CUDA_SUCCESS;
}

CUresult managed_free(void* p, allocation const& a, CUstream stream, const char* entry, event_start start) noexcept {
  process_deallocate(process_memory::managed, p, a.bytes, entry);
  message(level::trace, "%s: %p (%zu bytes) back to the managed chain", entry, p, a.bytes);
  log_process_event(process_memory::managed, log_action::free, p, a.bytes, stream, a.device, entry, CUDA_SUCCESS,
                    start);
  return CUDA_SUCCESS;
}

}  // namespace gpumem::shim
