#include "serve/own_context_memory.hpp"

#include "serve/device_chains.hpp"
#include "shim_state.hpp"

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/limiting_resource_adaptor.hpp>

#include <array>
#include <atomic>

namespace gpumem::shim {
namespace {

std::array<std::atomic<std::size_t>, max_devices>& live_bytes() noexcept {
  static std::array<std::atomic<std::size_t>, max_devices> bytes{};
  return bytes;
}

constexpr int refusals_told = 8;

limiting_resource_adaptor* limiter_of(device_chain* c) noexcept {
  return c != nullptr && c->chain != nullptr ? c->chain->limiter() : nullptr;
}

}  // namespace

device_chain* charge_own_context(std::size_t bytes, const char* entry, bool& refused) noexcept {
  refused = false;
  CUcontext ctx = nullptr;
  // A primary context is the chain's to serve, and without a context CUDA answers.
  if (current_device(ctx) >= 0 || ctx == nullptr) return nullptr;
  CUdevice dev{};
  if (detail::driver().cuCtxGetDevice(&dev) != CUDA_SUCCESS || dev < 0 || dev >= max_devices) return nullptr;
  device_chain* const c = built_chain(static_cast<int>(dev));
  limiting_resource_adaptor* const lim = limiter_of(c);
  if (lim == nullptr) return nullptr;
  if (!lim->try_charge(bytes)) {
    refused = true;
    // A program retrying in a loop must not flood stderr: the first few are said.
    static std::atomic<int> told{0};
    if (int const n = told.fetch_add(1, std::memory_order_relaxed); n < refusals_told) {
      message(level::error,
              "%s(%zu bytes) in a context the program created on device %d: refused (out of memory): memory "
              "allocated in such a context is not pooled but counts against gpumem's limit of %zu bytes, of which %zu "
              "are in use%s",
              entry, bytes, static_cast<int>(dev), lim->limit(), lim->used_bytes(),
              n + 1 == refusals_told ? " (further such refusals are not reported)" : "");
    }
    return nullptr;
  }
  live_bytes()[static_cast<std::size_t>(dev)].fetch_add(bytes, std::memory_order_relaxed);
  return c;
}

void uncharge_own_context(device_chain* chain, std::size_t bytes) noexcept {
  limiting_resource_adaptor* const lim = limiter_of(chain);
  if (lim == nullptr) return;
  lim->discharge(bytes);
  if (chain->device >= 0 && chain->device < max_devices) {
    live_bytes()[static_cast<std::size_t>(chain->device)].fetch_sub(bytes, std::memory_order_relaxed);
  }
}

void own_context_freed(allocation const& a) noexcept {
  if (from_chain(a.kind)) return;  // a chain's block: its chain gave the bytes back
  uncharge_own_context(a.chain, a.bytes);
}

std::size_t own_context_bytes(int device) noexcept {
  if (device < 0 || device >= max_devices) return 0;
  return live_bytes()[static_cast<std::size_t>(device)].load(std::memory_order_relaxed);
}

void reset_own_context_after_fork() noexcept {
  for (auto& b : live_bytes()) b.store(0, std::memory_order_relaxed);
}

}  // namespace gpumem::shim
