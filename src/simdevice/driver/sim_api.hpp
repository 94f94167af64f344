#pragma once
// Common header of the simulated libcuda.so.1: the real CUDA 13.0 declarations,
// exported (default visibility; everything else in the library is hidden), and
// the entry-point prologue that counts calls.

// cuda.h must come first through this header, or its functions stay hidden.
#if defined(__cuda_cuda_h__)
#error "include sim_api.hpp before <cuda.h> in the simulated driver"
#endif
#pragma GCC visibility push(default)
#include <cuda.h>
#include "gpumemsim.h"
#pragma GCC visibility pop

#include <atomic>

/// For exports cuda.h does not declare (_ptsz variants, the v1 cuGetProcAddress).
#define SIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace gpumemsim {

/// The call counter of one exported entry point (created once per name).
std::atomic<long>& call_counter(char const* entry) noexcept;

/// CUDA_SUCCESS once cuInit ran, CUDA_ERROR_NOT_INITIALIZED before.
CUresult init_status() noexcept;

}  // namespace gpumemsim

/// First statement of every exported entry point: counts the call.
#define SIM_ENTRY(name)                                                       \
  do {                                                                        \
    static std::atomic<long>& sim_counter_ = ::gpumemsim::call_counter(name); \
    sim_counter_.fetch_add(1, std::memory_order_relaxed);                     \
  } while (0)

/// Entry points that need cuInit first.
#define SIM_REQUIRE_INIT()                                                                   \
  do {                                                                                       \
    if (CUresult sim_r_ = ::gpumemsim::init_status(); sim_r_ != CUDA_SUCCESS) return sim_r_; \
  } while (0)
