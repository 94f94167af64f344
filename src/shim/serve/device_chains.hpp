#pragma once
// One resource chain per device, built from the settings on the device's first
// allocation (its context current, so percentages resolve against its memory).
//
// A chain is never destroyed: frees can arrive during exit, after the driver is
// gone, and destroying a chain returns memory to the driver. cudaDeviceReset /
// cuDevicePrimaryCtxReset drop the device's chain (its memory dies with the
// context; the chain object is retired, not destroyed) and a fresh one is built
// on next use. A forked child forgets all chains.
//
// Thread safety: lookups are one acquire load; building takes a per-device mutex.

#include <gpumem/config/resource_chain.hpp>
#include <gpumem/detail/driver_api.hpp>

#include <cuda.h>

#include <array>
#include <atomic>
#include <functional>
#include <memory>

namespace gpumem::shim {

inline constexpr int max_devices = 64;

struct device_chain {
  int device = -1;
  std::unique_ptr<config::resource_chain> chain;
  CUcontext primary = nullptr;          ///< retained primary context of `device`
  CUmemoryPool default_pool = nullptr;  ///< the device's default cuMemPool (FromPoolAsync)
  /// Whether a free through the chain may call the driver (and so needs `primary`
  /// current: scoped_chain_context); false for a chain with a pool on top.
  bool free_calls_driver = true;
};

/// Each device's chain once built (null: not built, or retired). Zero-initialised
/// before any constructor runs; read through built_chain() and chain_for().
extern std::array<std::atomic<device_chain*>, max_devices> g_chains;

/// The chain of `device` if built, else nullptr.
[[nodiscard]] inline device_chain* built_chain(int device) noexcept {
  if (device < 0 || device >= max_devices) return nullptr;
  return g_chains[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
}
/// chain_for()'s first call for a device: builds its chain.
[[nodiscard]] device_chain* build_chain_once(int device, CUresult& err) noexcept;
/// The chain of `device`, built if needed (the calling thread's current context must
/// be on `device`). nullptr with `err` set when it cannot be built; exits the process
/// on a configuration error, or a chain the device cannot hold (a pool larger than its
/// memory), unless on_error = passthrough (then err = CUDA_ERROR_NOT_SUPPORTED, for
/// this call and every later one: the caller passes the call through). Once built,
/// one load, inline: every allocation asks.
[[nodiscard]] inline device_chain* chain_for(int device, CUresult& err) noexcept {
  if (device_chain* c = built_chain(device)) [[likely]] { return c; }
  return build_chain_once(device, err);
}
/// Calls `fn` for every built chain.
void for_each_chain(std::function<void(device_chain&)> const& fn);
/// cudaDeviceReset: release the device's cached memory and retire its chain.
void drop_chain(int device) noexcept;
/// Forked child: forget every chain.
void reset_chains_after_fork() noexcept;

/// Device of the calling thread's current context when that context is the device's
/// primary context (the one the CUDA runtime uses, and the chains serve); -1 if no
/// context is current or the current one was made by cuCtxCreate: a pool serves one
/// context, so such contexts' allocations pass through to CUDA. `ctx` receives the
/// current context either way.
[[nodiscard]] int current_device(CUcontext& ctx) noexcept;

/// Makes `chain`'s primary context current for a scope when another one is
/// (a pointer of device 1 freed while device 0 is current).
class scoped_chain_context : detail::scoped_context {
 public:
  explicit scoped_chain_context(device_chain const& chain) noexcept : scoped_context{chain.primary} {}
  using scoped_context::ok;
};

/// Gives `p` back to `chain` as cudaFree would have (the chain's context current,
/// the legacy stream's order; in safe mode a barrier before reuse), for frees the
/// program made earlier and gpumem held back (a capture, another device's stream,
/// an open IPC import).
void free_as_cuda_free(device_chain& chain, void* p, std::size_t bytes, const char* entry) noexcept;

}  // namespace gpumem::shim
