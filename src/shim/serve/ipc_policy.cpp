#include "serve/ipc_policy.hpp"

#include "serve/allocation_registry.hpp"
#include "serve/device_chains.hpp"
#include "shim_state.hpp"

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/device_memory_resource.hpp>
#include <gpumem/stream_tracker.hpp>

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace gpumem::shim {

bool ipc_allowed(void* p, const char* entry) noexcept {
  auto const hit = registry().find_containing(reinterpret_cast<std::uintptr_t>(p));
  if (!hit || !from_chain(hit->second.kind)) return true;  // CUDA's own memory
  // The queries need the allocation's context; the caller may have none current yet.
  std::optional<scoped_chain_context> in;
  if (hit->second.chain != nullptr) in.emplace(*hit->second.chain);
  auto const& d = detail::driver();
  CUdeviceptr base = 0;
  std::size_t size = 0;
  auto const dp = reinterpret_cast<CUdeviceptr>(p);
  // A block that is a whole upstream allocation opens to the right memory, if that
  // allocation is one a legacy handle can name (cuMemAlloc's). Mapped memory cannot
  // be (vmm maps every page on its own: the range of one page's mapping is no sign
  // of a whole allocation), and CUDA would refuse it with a bare invalid-value error.
  unsigned legacy = 0;
  if (hit->first == dp &&
      d.cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, dp) == CUDA_SUCCESS &&
      legacy != 0 && d.cuMemGetAddressRange(&base, &size, dp) == CUDA_SUCCESS && base == dp &&
      size <= align_up(hit->second.bytes, allocation_alignment)) {
    // The block may have been reused behind a GPU-side barrier while its previous
    // owner's work still ran; another process's work is ordered by nothing of ours,
    // so let that work finish first (exporting is rare; never during a capture).
    if (!stream_tracker::capture_active() && d.cuCtxSynchronize() == CUDA_SUCCESS) state().stats.device_syncs.add();
    return true;
  }
  state().stats.ipc_refused.add();
  message(level::error,
          "%s(%p): refused (operation not supported): the pointer is a block inside a gpumem pool, and an IPC "
          "handle names a whole CUDA allocation, so another process would open the pool's slab, not this block. "
          "To share device memory between processes, run the program with GPUMEM_RESOURCE=cuda (gpumem-run "
          "--resource cuda): every allocation is then its own cudaMalloc, which IPC exports exactly; limits, "
          "logs and statistics still apply",
          entry, p);
  return false;
}

}  // namespace gpumem::shim
