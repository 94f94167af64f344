#pragma once
// Serving one allocation or free: the logic both interposition levels share.
//
// "Served once": a runtime hook (cudaMalloc) that can serve from the chain returns
// directly. When it must hand the call to the real runtime instead (no current
// context yet, bad arguments, or a failure whose error the runtime must record as
// its last error), it marks the thread with scoped_runtime_call; the driver hook the
// real runtime then calls serves the request (or replays the failure) and
// attributes it to the runtime entry point.
//
// Thread safety: everything here is per-thread state or goes through thread-safe
// registries and chains.

#include "observe/event_log.hpp"
#include "serve/allocation_registry.hpp"
#include "serve/live_streams.hpp"

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace gpumem::shim {

struct device_chain;

/// The runtime entry point the calling thread is inside of (nullptr: none), and a
/// result the next driver allocation/free hook must return instead of serving.
struct runtime_call {
  const char* entry = nullptr;
  CUresult forced = CUDA_SUCCESS;
};
[[nodiscard]] runtime_call& current_runtime_call() noexcept;

class scoped_runtime_call {
 public:
  explicit scoped_runtime_call(const char* entry, CUresult forced = CUDA_SUCCESS) noexcept;
  ~scoped_runtime_call();
  scoped_runtime_call(scoped_runtime_call const&) = delete;
  scoped_runtime_call& operator=(scoped_runtime_call const&) = delete;

 private:
  runtime_call saved_;
};

/// The entry point to attribute a driver-level call to: the runtime entry the thread
/// is inside of, else `driver_entry`.
[[nodiscard]] const char* attribute(const char* driver_entry) noexcept;
/// The forced result of the enclosing runtime call (consumed), or CUDA_SUCCESS.
[[nodiscard]] CUresult take_forced_result() noexcept;

/// The level an allocation entered at, for the statistics: a runtime entry point's
/// (served by its hook, or by the driver hook the real runtime called) or the
/// driver's own.
enum class entry_level : bool { driver, runtime };

/// A driver hook's level: the runtime's when the real runtime called it on the
/// program's behalf (scoped_runtime_call).
[[nodiscard]] inline entry_level driver_hook_level() noexcept {
  return current_runtime_call().entry != nullptr ? entry_level::runtime : entry_level::driver;
}

/// Allocates `bytes` (> 0) from the chain of the current context's device on
/// `stream` and registers it. A stream-ordered allocation on a stream created in
/// another device's primary context (`home`, from check_stream) is served from that
/// device's chain instead, as CUDA serves it from the stream's device.
/// CUDA_ERROR_INVALID_CONTEXT when no context is current; CUDA_ERROR_NOT_SUPPORTED
/// when the device passes calls through (its config failed with on_error =
/// passthrough), the stream lives in another device's non-primary context, or a
/// synchronous allocation comes during a capture from a thread CUDA may forbid it
/// (capture_may_refuse_unsafe_calls): the caller then hands the call to CUDA. On
/// out-of-memory the chain is trimmed and the allocation retried once.
CUresult chain_allocate(void** out, std::size_t bytes, CUstream stream, alloc_kind kind, const char* entry,
                        entry_level entered, stream_home const& home = {}) noexcept;

/// How a free orders itself: cudaFree's promise (the memory is free for any stream
/// at once: call_context::synchronous in safe mode) or cudaFreeAsync's, on its stream.
enum class free_kind : bool { sync, async };

/// Outcome of a free of a registered pointer. The default: not the shim's to
/// answer, nothing taken (hand the free to CUDA).
struct free_outcome {
  bool handled = false;  ///< true: `result` is the answer; false: hand the free to CUDA
  CUresult result = CUDA_SUCCESS;
  bool passthrough_allocation = false;  ///< not handled because CUDA made it (managed, captured, ...)
  allocation taken{};                   ///< passthrough_allocation: its record, for restore_registration()

  /// The shim answers the free with `r`.
  [[nodiscard]] static free_outcome answered(CUresult r) noexcept { return {true, r, false, {}}; }
  /// CUDA's own memory: CUDA answers; `a` is its record, taken until CUDA did.
  [[nodiscard]] static free_outcome cudas_memory(allocation const& a) noexcept {
    return {false, CUDA_SUCCESS, true, a};
  }
};

/// Re-registers CUDA's memory whose free CUDA refused: a failed free never consumes
/// the pointer's registration.
void restore_registration(void* p, allocation const& a) noexcept;
/// After CUDA answered a free the shim handed it (`o` from free_registered): a
/// refused free of CUDA's memory re-registers it, an accepted one gives back its
/// charge to a limit (own_context_memory.hpp).
void settle_passthrough_free(void* p, free_outcome const& o, bool freed) noexcept;

/// Frees `p` if the shim registered it, as `kind` orders: free_kind::async on
/// `stream`; free_kind::sync as cudaFree (call_context::synchronous in safe mode).
/// Double frees are refused with CUDA_ERROR_INVALID_VALUE and logged; a free on a
/// destroyed or made-up stream gets CUDA's error and leaves the pointer allocated.
free_outcome free_registered(void* p, CUstream stream, free_kind kind, const char* entry) noexcept;

/// Counts and logs an allocation CUDA made for us (pass-through kinds), registering
/// it on success so its free finds its way back. `charged`: the chain whose limit
/// the allocation was charged to (charge_own_context), kept with the registration.
/// Returns whether this call registered it: if not (it failed, is already
/// registered, or there was no host memory), nothing keeps `charged`.
bool note_passthrough_allocation(void* p, std::size_t bytes, CUstream stream, alloc_kind kind, const char* entry,
                                 CUresult result, event_start start, device_chain* charged = nullptr) noexcept;
/// Counts and logs a free handed to CUDA.
void note_passthrough_free(void* p, CUstream stream, const char* entry, CUresult result, event_start start) noexcept;
/// Counts and logs an allocation refused before reaching a chain (bad arguments).
void note_failed_allocation(std::size_t bytes, CUstream stream, const char* entry, CUresult result) noexcept;

/// Whether `pool` is the default memory pool of the current device (the only pool
/// cuMemAllocFromPoolAsync is served from the chain for; the program's own pools
/// keep their properties, so their allocations pass through).
[[nodiscard]] bool is_default_pool(CUmemoryPool pool) noexcept;

/// The per-thread default stream handle for _ptsz entry points' stream 0.
[[nodiscard]] inline CUstream ptsz_stream(CUstream s) noexcept {
  return s == nullptr ? reinterpret_cast<CUstream>(std::uintptr_t{2}) : s;
}

}  // namespace gpumem::shim
