// The driver's own resolvers: cuGetProcAddress (v1 and _v2) and the runtime's
// cudaGetDriverEntryPoint*. The REAL resolver runs first, so it picks the ABI for
// the caller's cudaVersion and flags (cuMemAlloc at 3000 is the 32-bit v1;
// PER_THREAD_DEFAULT_STREAM gives the _ptsz variants); its answer is then mapped to
// our hook by address (hook_for_real). Asking for "cuGetProcAddress" itself yields
// our resolver, so later look-ups come back here too.

#include "hook_table.hpp"
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

void map_result(void** pfn) noexcept {
  if (pfn != nullptr && *pfn != nullptr && hooks_wanted()) *pfn = hook_for_real(*pfn);
}

}  // namespace
}  // namespace gpumem::shim

using namespace gpumem::shim;

#define GPUMEM_EXPORT extern "C" __attribute__((visibility("default")))

GPUMEM_EXPORT CUresult gpumem_cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                               cuuint64_t flags) __asm__("cuGetProcAddress");
CUresult gpumem_cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  auto const r = real<gpa_v1_fn>(hook_id::h_cuGetProcAddress);
  if (r == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult const res = r(symbol, pfn, cudaVersion, flags);
  if (res == CUDA_SUCCESS) map_result(pfn);
  return res;
}

GPUMEM_EXPORT CUresult gpumem_cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                                  CUdriverProcAddressQueryResult* status) __asm__("cuGetProcAddress_v2");
CUresult gpumem_cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult* status) {
  auto const r = real<gpa_v2_fn>(hook_id::h_cuGetProcAddress_v2);
  if (r == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult const res = r(symbol, pfn, cudaVersion, flags, status);
  if (res == CUDA_SUCCESS) map_result(pfn);
  return res;
}

#define GPUMEM_ENTRY_POINT_HOOK(name)                                                                         \
  GPUMEM_EXPORT cudaError_t gpumem_##name(const char* symbol, void** pfn, unsigned long long flags,            \
                                          cudaDriverEntryPointQueryResult* status) __asm__(#name);             \
  cudaError_t gpumem_##name(const char* symbol, void** pfn, unsigned long long flags,                          \
                            cudaDriverEntryPointQueryResult* status) {                                         \
    auto const r = real<entry_fn>(hook_id::h_##name);                                                              \
    if (r == nullptr) return cudaErrorNotSupported;                                                            \
    cudaError_t const res = r(symbol, pfn, flags, status);                                                     \
    if (res == cudaSuccess) map_result(pfn);                                                                   \
    return res;                                                                                                \
  }
GPUMEM_ENTRY_POINT_HOOK(cudaGetDriverEntryPoint)
GPUMEM_ENTRY_POINT_HOOK(cudaGetDriverEntryPoint_ptsz)

#define GPUMEM_ENTRY_POINT_BY_VERSION_HOOK(name)                                                              \
  GPUMEM_EXPORT cudaError_t gpumem_##name(const char* symbol, void** pfn, unsigned int version,                \
                                          unsigned long long flags, cudaDriverEntryPointQueryResult* status)   \
      __asm__(#name);                                                                                          \
  cudaError_t gpumem_##name(const char* symbol, void** pfn, unsigned int version, unsigned long long flags,    \
                            cudaDriverEntryPointQueryResult* status) {                                         \
    auto const r = real<entry_by_version_fn>(hook_id::h_##name);                                                   \
    if (r == nullptr) return cudaErrorNotSupported;                                                            \
    cudaError_t const res = r(symbol, pfn, version, flags, status);                                            \
    if (res == cudaSuccess) map_result(pfn);                                                                   \
    return res;                                                                                                \
  }
GPUMEM_ENTRY_POINT_BY_VERSION_HOOK(cudaGetDriverEntryPointByVersion)
GPUMEM_ENTRY_POINT_BY_VERSION_HOOK(cudaGetDriverEntryPointByVersion_ptsz)
