#pragma once
// Giving cached device memory back when the program asks, the way CUDA programs
// ask for it (a pool caches what the program freed; CUDA's own pools give memory
// back at synchronizations, past their release threshold, and on cudaMemPoolTrimTo):
//
//  - at synchronization points: cuCtxSynchronize, cuStreamSynchronize(_ptsz),
//    cuEventSynchronize and the runtime's cudaDeviceSynchronize,
//    cudaStreamSynchronize(_ptsz), cudaEventSynchronize, once they returned success,
//    apply the current device's release threshold (release_at_sync);
//  - cudaMemPoolTrimTo / cuMemPoolTrimTo on the default pool of a device gpumem
//    serves trims its chain as well as CUDA's pool;
//  - cudaMemPoolGetAttribute / cuMemPoolGetAttribute on such a pool add the chain's
//    figures to CUDA's (reserved and used memory, current and high), and report the
//    chain's release threshold; cudaMemPoolSetAttribute / cuMemPoolSetAttribute
//    resets the highs and sets the threshold;
//  - gpumem_shim_trim (the query API, gpumem.trim() in Python).
//
// The release threshold (settings::release_threshold, or what the program set as
// the default pool's RELEASE_THRESHOLD) says how much of what the chain caches (the
// device memory it holds less the bytes the program holds) a synchronization
// leaves: a number of bytes, none of it ("unlimited": never release), or "auto": the
// high-water of the program's live bytes since the previous synchronization point
// at which the threshold was applied, less the bytes it holds now (memory it needed
// in that interval stays cached, the rest goes back), after which that high-water
// restarts from what it holds now. Memory goes back only when the cache exceeds what
// stays by more than release_slack.
//
// Cost at a synchronization with nothing to give back: a few loads (capture count,
// current context, chain, threshold, two lock-free byte estimates) and, in auto
// mode, the exchange that restarts the interval's high-water. No lock, no
// allocation, no environment read.
//
// A release waits for the GPU: the pool reclaims what waits for a barrier and lets
// the GPU reach it before it unmaps pages (pool_memory_resource::trim). Never while
// a stream capture is active anywhere (a wait would break it).
//
// Thread safety: every function is thread-safe; per-device state is atomics. Two
// threads synchronizing at once may both release; the pool serialises its trims.

#include <cuda.h>

#include <cstddef>

namespace gpumem::shim {

struct device_chain;

/// A release is made only when the cache exceeds what should stay by more than
/// this: the pool gives memory back in whole 2 MiB pages.
inline constexpr std::size_t release_slack = std::size_t{2} << 20U;

/// A synchronization call returned success: applies the release threshold of the
/// current device's chain, if built (see above). Call it once per program-level
/// synchronization (a runtime hook calls it, the driver hook the runtime reaches
/// does not).
void release_at_sync() noexcept;

/// Gives back what `c` caches until at most `keep` cached bytes stay
/// (device_memory_resource::trim), in `c`'s context; the bytes given back in
/// *released. False, giving nothing back, while a stream capture is active or when
/// the chain's trim failed. `entry` names the caller for the chain's call context.
bool trim_chain(device_chain& c, std::size_t keep, std::size_t& released, const char* entry) noexcept;

/// The device whose default memory pool `pool` is, or -1 for any other pool (a
/// pool the program created) or when gpumem does not serve allocations.
[[nodiscard]] int default_pool_device(CUmemoryPool pool) noexcept;

/// cuMemPoolTrimTo / cudaMemPoolTrimTo before CUDA's own: trims the chain of the
/// device whose default pool `pool` is (nothing for other pools, for a device whose
/// chain is not built, or during a capture).
void trim_default_pool(CUmemoryPool pool, std::size_t keep, const char* entry) noexcept;

/// cuMemPoolGetAttribute / cudaMemPoolGetAttribute answered with success by CUDA
/// (`value` holds CUDA's answer): for a default pool gpumem serves, adds the chain's
/// part to the reserved and used bytes (current and high) and reports the chain's
/// release threshold instead of CUDA's. Other pools and attributes: unchanged.
void add_pool_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) noexcept;

/// cuMemPoolSetAttribute / cudaMemPoolSetAttribute accepted by CUDA: for a default
/// pool gpumem serves, RESERVED_MEM_HIGH and USED_MEM_HIGH restart the chain's highs
/// from the current values (the report's peaks are not touched), RELEASE_THRESHOLD
/// becomes the device's release threshold. Recorded even before the device's chain
/// is built (programs set the threshold at start).
void note_pool_attribute_set(CUmemoryPool pool, CUmemPool_attribute attr, void const* value) noexcept;

/// cudaDeviceReset / cuDevicePrimaryCtxReset: the device's release state starts anew
/// (its next chain starts with the configured threshold).
void forget_release_state(int device) noexcept;
/// Forked child: every device's release state starts anew.
void reset_release_after_fork() noexcept;

}  // namespace gpumem::shim
