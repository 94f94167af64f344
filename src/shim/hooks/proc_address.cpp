// The driver's own resolvers: cuGetProcAddress (v1 and _v2) and the runtime's
// cudaGetDriverEntryPoint*. The REAL resolver runs first, so it picks the ABI for
// the caller's cudaVersion and flags (cuMemAlloc at 3000 is the 32-bit v1;
// PER_THREAD_DEFAULT_STREAM gives the _ptsz variants); its answer is then mapped to
// our hook by address (hook_for_real). Asking for "cuGetProcAddress" itself yields
// our resolver, so later look-ups come back here too.

#include "hooks/hook_macros.hpp"
#include "hooks/hook_table.hpp"
#include "shim_state.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace gpumem::shim {
namespace {

using gpa_v1_fn = CUresult (*)(const char*, void**, int, cuuint64_t);
using gpa_v2_fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using entry_fn = cudaError_t (*)(const char*, void**, unsigned long long, cudaDriverEntryPointQueryResult*);
using entry_by_version_fn = cudaError_t (*)(const char*, void**, unsigned int, unsigned long long,
                                            cudaDriverEntryPointQueryResult*);

/// Calls the real resolver behind hook `id` with `args`; on `ok`, replaces the
/// function it wrote to *pfn by our hook for it. `unavailable` while the real
/// resolver's library is not loaded.
template <class Real, class Result, class... Args>
Result resolve(hook_id id, Result ok, Result unavailable, void** pfn, Args... args) noexcept {
  auto const r = real<Real>(id);
  if (r == nullptr) return unavailable;
  Result const res = r(args...);
  if (res == ok && pfn != nullptr && *pfn != nullptr && hooks_wanted()) *pfn = hook_for_real(*pfn);
  return res;
}

}  // namespace
}  // namespace gpumem::shim

using namespace gpumem::shim;

GPUMEM_HOOK(CUresult, cuGetProcAddress, (const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags)) {
  return resolve<gpa_v1_fn>(hook_id::h_cuGetProcAddress, CUDA_SUCCESS, CUDA_ERROR_NOT_INITIALIZED, pfn, symbol, pfn,
                            cudaVersion, flags);
}

GPUMEM_HOOK(CUresult, cuGetProcAddress_v2,
            (const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
             CUdriverProcAddressQueryResult* status)) {
  return resolve<gpa_v2_fn>(hook_id::h_cuGetProcAddress_v2, CUDA_SUCCESS, CUDA_ERROR_NOT_INITIALIZED, pfn, symbol, pfn,
                            cudaVersion, flags, status);
}

// cuda_runtime_api.h may map these names to their _ptsz twins by macro; GPUMEM_HOOK
// stringizes and pastes its name argument, so the name written here is the one
// exported.
GPUMEM_HOOK(cudaError_t, cudaGetDriverEntryPoint,
            (const char* symbol, void** pfn, unsigned long long flags, cudaDriverEntryPointQueryResult* status)) {
  return resolve<entry_fn>(hook_id::h_cudaGetDriverEntryPoint, cudaSuccess, cudaErrorNotSupported, pfn, symbol, pfn,
                           flags, status);
}

GPUMEM_HOOK(cudaError_t, cudaGetDriverEntryPoint_ptsz,
            (const char* symbol, void** pfn, unsigned long long flags, cudaDriverEntryPointQueryResult* status)) {
  return resolve<entry_fn>(hook_id::h_cudaGetDriverEntryPoint_ptsz, cudaSuccess, cudaErrorNotSupported, pfn, symbol,
                           pfn, flags, status);
}

GPUMEM_HOOK(cudaError_t, cudaGetDriverEntryPointByVersion,
            (const char* symbol, void** pfn, unsigned int version, unsigned long long flags,
             cudaDriverEntryPointQueryResult* status)) {
  return resolve<entry_by_version_fn>(hook_id::h_cudaGetDriverEntryPointByVersion, cudaSuccess, cudaErrorNotSupported,
                                      pfn, symbol, pfn, version, flags, status);
}

GPUMEM_HOOK(cudaError_t, cudaGetDriverEntryPointByVersion_ptsz,
            (const char* symbol, void** pfn, unsigned int version, unsigned long long flags,
             cudaDriverEntryPointQueryResult* status)) {
  return resolve<entry_by_version_fn>(hook_id::h_cudaGetDriverEntryPointByVersion_ptsz, cudaSuccess,
                                      cudaErrorNotSupported, pfn, symbol, pfn, version, flags, status);
}
