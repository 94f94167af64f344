#include "serve/mem_info.hpp"

#include "serve/created_memory.hpp"
#include "serve/device_chains.hpp"
#include "serve/own_context_memory.hpp"

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/limiting_resource_adaptor.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>

#include <algorithm>

namespace gpumem::shim {

CUresult pool_mem_info(std::size_t* free_bytes, std::size_t* total_bytes) noexcept {
  auto const& d = detail::driver();
  std::size_t rf = 0;
  std::size_t rt = 0;
  if (CUresult r = d.cuMemGetInfo(&rf, &rt); r != CUDA_SUCCESS) return r;
  CUcontext ctx = nullptr;
  std::size_t f = rf;
  std::size_t t = rt;
  // Built here if this is the device's first gpumem call: frameworks size themselves
  // from the first cudaMemGetInfo, which must already show the limit.
  int const dev = current_device(ctx);
  CUresult err = CUDA_SUCCESS;
  device_chain* const c = dev >= 0 ? chain_for(dev, err) : nullptr;
  if (c != nullptr) {
    try {
      auto const info = c->chain->info();
      std::size_t const available = std::min(rf + info.free_bytes, rt);
      if (auto* lim = c->chain->limiter()) {
        // In use = what the program holds (the limiter may sit below a pool and
        // count the pool's reservation too).
        t = lim->limit();
        // What the program created itself counts too (created_memory.hpp), and what it
        // allocated in contexts it created (own_context_memory.hpp).
        auto const live = c->chain->live_stats().bytes().current;
        std::size_t const used = (live > 0 ? static_cast<std::size_t>(live) : 0) + created_on(dev).bytes +
                                 own_context_bytes(dev);
        f = std::min(t > used ? t - used : 0, available);
      } else {
        f = available;
      }
    } catch (...) {
      // info() failed: CUDA's own numbers are still true, if pessimistic.
    }
  }
  if (free_bytes != nullptr) *free_bytes = f;
  if (total_bytes != nullptr) *total_bytes = t;
  return CUDA_SUCCESS;
}

}  // namespace gpumem::shim
