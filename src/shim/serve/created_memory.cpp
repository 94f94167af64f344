#include "serve/created_memory.hpp"

#include "hooks/hook_table.hpp"
#include "observe/event_log.hpp"
#include "serve/device_chains.hpp"
#include "shim_state.hpp"

#include <gpumem/limiting_resource_adaptor.hpp>

#include <array>
#include <atomic>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>

namespace gpumem::shim {
namespace {

using create_fn = CUresult (*)(CUmemGenericAllocationHandle*, std::size_t, CUmemAllocationProp const*,
                               unsigned long long);
using release_fn = CUresult (*)(CUmemGenericAllocationHandle);
using map_fn = CUresult (*)(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle, unsigned long long);
using unmap_fn = CUresult (*)(CUdeviceptr, std::size_t);

/// One creation's charge, held by its handle until released and by each mapping
/// until unmapped; the last hold gives it back (CUDA frees the memory then).
struct charge {
  std::size_t bytes = 0;
  int device = -1;
  /// The limit it counts against, or null. A chain retired by a device reset keeps
  /// its adaptors alive, so the pointer stays valid; created memory survives the
  /// reset and stays charged there, not to the device's next chain.
  limiting_resource_adaptor* charged = nullptr;
  int holds = 1;  ///< the handle's, and one per mapping (under the table's mutex)
};
using charge_ptr = std::shared_ptr<charge>;

struct mapping {
  std::size_t size = 0;
  charge_ptr of;
};

struct table {
  std::mutex mtx;
  std::unordered_map<CUmemGenericAllocationHandle, charge_ptr> live;  ///< handles not yet released
  std::map<CUdeviceptr, mapping> mapped;                              ///< mappings of tracked handles
  std::array<created_totals, max_devices> per_device{};
};

table& created() noexcept {
  // NOLINTNEXTLINE(bugprone-unhandled-exception-at-new): running out of memory here ends the process
  static auto* const t = new table;  // never destroyed: a release may come during exit
  return *t;
}

void* as_pointer(CUmemGenericAllocationHandle h) noexcept {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(h));
}

CUresult failed(std::size_t bytes, int device, event_start start, CUresult r) noexcept {
  state().stats.failed_allocations.add();
  log_event(event_row(log_action::allocate_failure, nullptr, bytes, nullptr, device, "cuMemCreate", r), start);
  return r;
}

/// Once per process: where this memory stands.
void tell_once(int device, std::size_t bytes) noexcept {
  static std::atomic<bool> told{false};
  if (told.exchange(true, std::memory_order_relaxed)) return;
  message(level::info,
          "the program creates device memory itself (cuMemCreate, %zu bytes on device %d), as JAX's XLA and PyTorch's "
          "expandable segments do: gpumem counts it against the limit and logs it, but cannot pool it",
          bytes, device);
}

/// A new handle's charge into the table. False (nothing recorded) without host memory.
bool remember(CUmemGenericAllocationHandle h, charge const& c) noexcept {
  auto& t = created();
  try {
    auto p = std::make_shared<charge>(c);
    std::lock_guard lock{t.mtx};
    t.live.insert_or_assign(h, std::move(p));
    auto& d = t.per_device[static_cast<std::size_t>(c.device)];
    ++d.handles;
    ++d.created;
    d.bytes += c.bytes;
    if (d.bytes > d.peak) d.peak = d.bytes;
    return true;
  } catch (...) { return false; }
}

/// Ends one hold; the last one gives the charge back. Caller holds the table's mutex.
void drop_hold_locked(table& t, charge& c) noexcept {
  if (--c.holds != 0) return;
  auto& d = t.per_device[static_cast<std::size_t>(c.device)];
  --d.handles;
  d.bytes -= c.bytes;
  if (c.charged != nullptr) c.charged->discharge(c.bytes);
}

}  // namespace

CUresult create_tracked(CUmemGenericAllocationHandle* handle, std::size_t bytes, CUmemAllocationProp const* prop,
                        unsigned long long flags) noexcept {
  auto const f = real<create_fn>(hook_id::h_cuMemCreate);
  if (f == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  // Bad arguments and host memory: CUDA's own answer.
  if (!interposing_allocations_or_exit() || handle == nullptr || prop == nullptr || bytes == 0 ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 || prop->location.id >= max_devices) {
    return f(handle, bytes, prop, flags);
  }
  int const dev = prop->location.id;
  auto const start = event_clock();
  // The device's chain holds its limit. Built here only while the device's primary
  // context is current: building it for another context would retain the primary
  // one, a context the program never asked for.
  CUcontext ctx = nullptr;
  CUresult err = CUDA_SUCCESS;
  device_chain* const c = current_device(ctx) == dev ? chain_for(dev, err) : built_chain(dev);
  limiting_resource_adaptor* const lim = c != nullptr ? c->chain->limiter() : nullptr;
  if (lim != nullptr && !lim->try_charge(bytes)) {
    message(level::error,
            "cuMemCreate(%zu bytes on device %d): refused (out of memory): device memory a program creates itself "
            "counts against gpumem's limit of %zu bytes, of which %zu are in use",
            bytes, dev, lim->limit(), lim->used_bytes());
    return failed(bytes, dev, start, CUDA_ERROR_OUT_OF_MEMORY);
  }
  CUresult r = f(handle, bytes, prop, flags);
  detail::note_slow_work();  // CUDA's own call: its row is timed
  if (r == CUDA_ERROR_OUT_OF_MEMORY && c != nullptr) {
    // What the pool caches may be what fills the device: given back, one more try.
    try {
      scoped_chain_context in_chain{*c};
      static_cast<void>(c->chain->top().release());
    } catch (...) {}
    r = f(handle, bytes, prop, flags);
  }
  if (r != CUDA_SUCCESS) {
    if (lim != nullptr) lim->discharge(bytes);
    return failed(bytes, dev, start, r);
  }
  if (!remember(*handle, charge{bytes, dev, lim})) {
    // Untracked from here: its release will find nothing to give back.
    if (lim != nullptr) lim->discharge(bytes);
    return CUDA_SUCCESS;
  }
  state().stats.passthrough_allocations.add();
  log_event(event_row(log_action::allocate, as_pointer(*handle), bytes, nullptr, dev, "cuMemCreate", CUDA_SUCCESS),
            start);
  tell_once(dev, bytes);
  return CUDA_SUCCESS;
}

CUresult release_tracked(CUmemGenericAllocationHandle handle) noexcept {
  auto const f = real<release_fn>(hook_id::h_cuMemRelease);
  if (f == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!active()) return f(handle);
  auto const start = event_clock();
  auto& t = created();
  // Out of the table before CUDA may hand the same handle to another thread's create.
  charge_ptr c;
  {
    std::lock_guard lock{t.mtx};
    if (auto const it = t.live.find(handle); it != t.live.end()) {
      c = std::move(it->second);
      t.live.erase(it);
    }
  }
  CUresult const result = f(handle);
  detail::note_slow_work();  // CUDA's own call: its row is timed
  if (!c) return result;     // not one we saw created: CUDA's answer alone
  std::lock_guard lock{t.mtx};
  if (result != CUDA_SUCCESS) {
    try {
      t.live.emplace(handle, c);
    } catch (...) {
      drop_hold_locked(t, *c);  // no host memory to keep following it: given back
    }
    return result;
  }
  drop_hold_locked(t, *c);  // the memory stays charged while a mapping holds it
  state().stats.passthrough_frees.add();
  log_event(event_row(log_action::free, as_pointer(handle), c->bytes, nullptr, c->device, "cuMemRelease", result),
            start);
  return result;
}

CUresult map_tracked(CUdeviceptr ptr, std::size_t size, std::size_t offset, CUmemGenericAllocationHandle handle,
                     unsigned long long flags) noexcept {
  auto const f = real<map_fn>(hook_id::h_cuMemMap);
  if (f == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult const r = f(ptr, size, offset, handle, flags);
  if (r != CUDA_SUCCESS || !active()) return r;
  auto& t = created();
  std::lock_guard lock{t.mtx};
  auto const it = t.live.find(handle);
  if (it == t.live.end()) return r;  // memory gpumem did not see created (its own pool's, say)
  try {
    if (t.mapped.try_emplace(ptr, mapping{size, it->second}).second) ++it->second->holds;
  } catch (...) {
    // No host memory to follow the mapping: the charge goes back with the handle.
  }
  return r;
}

CUresult unmap_tracked(CUdeviceptr ptr, std::size_t size) noexcept {
  auto const f = real<unmap_fn>(hook_id::h_cuMemUnmap);
  if (f == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!active()) return f(ptr, size);
  auto& t = created();
  // The mappings inside the range leave the table first (another thread may map
  // the range again once CUDA unmapped it) and come back if CUDA refuses.
  std::map<CUdeviceptr, mapping> ending;
  {
    std::lock_guard lock{t.mtx};
    auto it = t.mapped.lower_bound(ptr);
    while (it != t.mapped.end() && it->first - ptr < size) {
      auto const next = std::next(it);
      ending.insert(t.mapped.extract(it));  // moves the node: no allocation
      it = next;
    }
  }
  CUresult const r = f(ptr, size);
  if (ending.empty()) return r;
  std::lock_guard lock{t.mtx};
  if (r != CUDA_SUCCESS) {
    t.mapped.merge(ending);
    return r;
  }
  for (auto& [va, m] : ending) drop_hold_locked(t, *m.of);
  return r;
}

created_totals created_on(int device) noexcept {
  if (device < 0 || device >= max_devices) return {};
  auto& t = created();
  std::lock_guard lock{t.mtx};
  return t.per_device[static_cast<std::size_t>(device)];
}

void reset_created_after_fork() noexcept {
  auto& t = created();
  new (&t.mtx) std::mutex{};  // a parent thread may have held it at fork()
  t.live.clear();
  t.mapped.clear();
  t.per_device = {};
}

}  // namespace gpumem::shim
