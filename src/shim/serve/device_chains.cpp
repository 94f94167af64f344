#include "serve/device_chains.hpp"

#include "shim_state.hpp"

#include <gpumem/call_context.hpp>
#include <gpumem/config.hpp>
#include <gpumem/detail/driver_api.hpp>

#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <new>

namespace gpumem::shim {
namespace {

// A device's chain is g_chains[device]; building and retiring it hold build_mtx.
struct slot {
  std::mutex build_mtx;
  bool passthrough = false;  // its chain could not be configured and on_error = passthrough
};

std::array<slot, max_devices>& slots() noexcept {
  // NOLINTNEXTLINE(bugprone-unhandled-exception-at-new): running out of memory here ends the process
  static auto* const s = new std::array<slot, max_devices>{};
  return *s;
}

// A chain the device cannot hold (a pool's initial size past its memory, a
// resource the driver refuses) is a configuration this process cannot honour:
// on_error decides, as for one that does not load: the process stops with one
// message, or the device passes every call to CUDA. Never a failure per call,
// each retrying the build and saying so again.
void cannot_build(int device, char const* why, CUresult& err) noexcept {
  char text[1024];
  std::snprintf(text, sizeof text, "device %d: cannot build the resource chain: %s", device, why);
  if (state().settings.on_config_error != config::on_error::passthrough) exit_refusing_configuration(text);
  message(level::error, "%s; device %d passes every call to CUDA (on_error = passthrough)", text, device);
  err = CUDA_ERROR_NOT_SUPPORTED;
}

device_chain* build(int device, CUresult& err) noexcept {
  auto const& d = detail::driver();
  auto dc = std::make_unique<device_chain>();
  dc->device = device;
  try {
    CUdevice dev{};
    if (CUresult r = d.cuDeviceGet(&dev, device); r != CUDA_SUCCESS) {
      err = r;
      return nullptr;
    }
    if (CUresult r = d.cuDevicePrimaryCtxRetain(&dc->primary, dev); r != CUDA_SUCCESS) {
      err = r;
      return nullptr;
    }
    if (d.cuDeviceGetDefaultMemPool != nullptr) (void)d.cuDeviceGetDefaultMemPool(&dc->default_pool, dev);
    dc->chain = config::build_chain(state().settings, device);
    dc->free_calls_driver = dc->chain->top().deallocate_calls_driver();
    message(level::info, "device %d: %s", device, dc->chain->describe().c_str());
    return dc.release();
  } catch (config::config_error const& e) {
    if (e.policy == config::on_error::passthrough) {
      message(level::error, "%s; device %d passes every call to CUDA (on_error = passthrough)", e.what(), device);
      err = CUDA_ERROR_NOT_SUPPORTED;
      return nullptr;
    }
    exit_refusing_configuration(e.what());
  } catch (std::exception const& e) { cannot_build(device, e.what(), err); }
  if (dc->primary != nullptr) {
    CUdevice dev{};
    if (d.cuDeviceGet(&dev, device) == CUDA_SUCCESS) (void)d.cuDevicePrimaryCtxRelease(dev);
  }
  return nullptr;
}

// Each device's primary context, retained once (never released, like a chain's own
// retain), so its handle can never be reused for a context the program creates.
std::array<std::atomic<CUcontext>, max_devices>& primaries() noexcept {
  // NOLINTNEXTLINE(bugprone-unhandled-exception-at-new): running out of memory here ends the process
  static auto* const p = new std::array<std::atomic<CUcontext>, max_devices>{};
  return *p;
}

// The primary context of `device` if it is active, else nullptr: retaining an
// inactive one would create a context (and spend its memory) the program never asked for.
CUcontext active_primary(int device) noexcept {
  auto& slot = primaries()[static_cast<std::size_t>(device)];
  if (CUcontext c = slot.load(std::memory_order_acquire)) return c;
  auto const& d = detail::driver();
  unsigned int flags = 0;
  int active = 0;
  CUdevice dev{};
  if (d.cuDevicePrimaryCtxGetState == nullptr || d.cuDeviceGet(&dev, device) != CUDA_SUCCESS ||
      d.cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || active == 0) {
    return nullptr;
  }
  CUcontext c = nullptr;
  if (d.cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS) return nullptr;
  CUcontext expected = nullptr;
  if (!slot.compare_exchange_strong(expected, c, std::memory_order_acq_rel)) {
    (void)d.cuDevicePrimaryCtxRelease(dev);  // another thread retained it first
    return expected;
  }
  return c;
}

}  // namespace

constinit std::array<std::atomic<device_chain*>, max_devices> g_chains{};

device_chain* build_chain_once(int device, CUresult& err) noexcept {
  if (device < 0 || device >= max_devices) {
    err = CUDA_ERROR_INVALID_DEVICE;
    return nullptr;
  }
  auto const i = static_cast<std::size_t>(device);
  auto& s = slots()[i];
  std::lock_guard lock{s.build_mtx};
  if (auto* c = g_chains[i].load(std::memory_order_acquire)) return c;
  if (s.passthrough) {
    err = CUDA_ERROR_NOT_SUPPORTED;
    return nullptr;
  }
  auto* c = build(device, err);
  if (c == nullptr && err == CUDA_ERROR_NOT_SUPPORTED) s.passthrough = true;
  if (c != nullptr) g_chains[i].store(c, std::memory_order_release);
  return c;
}

void for_each_chain(std::function<void(device_chain&)> const& fn) {
  for (auto& chain : g_chains) {
    if (auto* c = chain.load(std::memory_order_acquire)) fn(*c);
  }
}

void drop_chain(int device) noexcept {
  if (device < 0 || device >= max_devices) return;
  auto const i = static_cast<std::size_t>(device);
  std::lock_guard lock{slots()[i].build_mtx};
  auto* c = g_chains[i].exchange(nullptr, std::memory_order_acq_rel);
  if (c == nullptr) return;
  scoped_chain_context ctx{*c};  // the device's own context, whichever is current
  try {
    c->chain->top().release();  // cached memory goes back while the context still lives
  } catch (std::exception const& e) {
    message(level::warn, "device %d: releasing the pool before reset failed: %s", device, e.what());
  }
  c->chain->device_reset();  // and mapped memory, which the reset would not free
  // Retired, not destroyed: its blocks in use die with the context, and destroying
  // it would free them again after the reset (maybe someone else's memory by then).
  message(level::debug, "device %d: chain retired by device reset", device);
}

void reset_chains_after_fork() noexcept {
  for (auto& s : slots()) {
    new (&s.build_mtx) std::mutex{};
    s.passthrough = false;
  }
  for (auto& chain : g_chains) chain.store(nullptr, std::memory_order_relaxed);  // the parent's: unusable here
  for (auto& p : primaries()) p.store(nullptr, std::memory_order_relaxed);       // the parent's contexts
}

void free_as_cuda_free(device_chain& chain, void* p, std::size_t bytes, const char* entry) noexcept {
  scoped_chain_context ctx{chain};
  scoped_call_context call{entry, chain.device, safe_mode()};
  chain.chain->top().deallocate(p, bytes, stream_ref{});
}

int current_device(CUcontext& ctx) noexcept {
  thread_local CUcontext cached_ctx = nullptr;
  thread_local int cached_dev = -1;
  thread_local bool cached_primary = false;
  auto const& d = detail::driver();
  ctx = nullptr;
  if (d.init_result != CUDA_SUCCESS || d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) return -1;
  if (ctx != cached_ctx) {
    CUdevice dev{};
    if (d.cuCtxGetDevice(&dev) != CUDA_SUCCESS || dev < 0 || dev >= max_devices) return -1;
    cached_ctx = ctx;
    cached_dev = static_cast<int>(dev);
    cached_primary = active_primary(cached_dev) == ctx;
  }
  if (cached_primary) return cached_dev;
  // A context seen as not primary while the primary was inactive: its handle may
  // since have been freed and reused by the primary (one load to notice).
  return primaries()[static_cast<std::size_t>(cached_dev)].load(std::memory_order_acquire) == ctx ? cached_dev : -1;
}

}  // namespace gpumem::shim
