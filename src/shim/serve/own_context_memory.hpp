#pragma once
// Device memory allocated while a context the program created (cuCtxCreate) is
// current. gpumem does not pool it (a pool holds memory of one context, the
// device's primary one): CUDA serves it, and the shim registers, counts and logs it
// like any pass-through allocation. But a device's limit covers it:
// - an allocation that would pass the limit is refused with
//   CUDA_ERROR_OUT_OF_MEMORY, as a pooled one would be (logged as a failed
//   allocation; the first 8 refusals of the process are said at error level);
// - the charge lasts until CUDA accepted the free;
// - cuMemGetInfo in a primary context counts it as in use.
// The limit lives in the device's chain, built by the first allocation made in the
// device's primary context: building it for another context would retain the
// primary one, a context (and its memory) the program never asked for. So memory
// allocated in created contexts before the device's chain exists is not limited. A
// chain retired by a device reset keeps its adaptors alive: such memory stays
// charged there, not to the device's next chain.
//
// Thread safety: any thread; the charge is one atomic operation on the limiter.

#include "serve/allocation_registry.hpp"

#include <cuda.h>

#include <cstddef>

namespace gpumem::shim {

struct device_chain;

/// Before CUDA allocates `bytes` as a pass-through: if a context the program created
/// is current and its device's chain has a limit, charges the allocation to it.
/// Returns the chain charged (nullptr: no limit applies); `refused`: the limit would
/// be passed, nothing was charged, and the caller answers CUDA_ERROR_OUT_OF_MEMORY.
[[nodiscard]] device_chain* charge_own_context(std::size_t bytes, const char* entry, bool& refused) noexcept;

/// Gives back what charge_own_context() charged for an allocation that CUDA then
/// refused, or that was not registered (`chain` may be null: nothing to give back).
void uncharge_own_context(device_chain* chain, std::size_t bytes) noexcept;

/// After CUDA accepted the free of a pass-through allocation: its charge goes back.
void own_context_freed(allocation const& a) noexcept;

/// Bytes allocated in created contexts of `device` and charged to its limit, live now.
[[nodiscard]] std::size_t own_context_bytes(int device) noexcept;

/// In a forked child: the parent's allocations mean nothing there.
void reset_own_context_after_fork() noexcept;

}  // namespace gpumem::shim
