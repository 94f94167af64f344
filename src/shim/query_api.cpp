// gpumem_shim_* : the C query API for tests and tools (gpumem_shim.h).

#include "gpumem_shim.h"

#include "serve/allocation_registry.hpp"
#include "serve/device_chains.hpp"
#include "serve/ipc_sharing.hpp"
#include "serve/process_chains.hpp"
#include "serve/release.hpp"
#include "shim_state.hpp"

#include <gpumem/statistics_resource_adaptor.hpp>
#include <gpumem/stream_tracker.hpp>

#include <cstring>
#include <string>

using namespace gpumem::shim;

extern "C" __attribute__((visibility("default"))) int gpumem_shim_get_stats(gpumem_shim_stats* out) {
  if (out == nullptr) return -1;
  try {
    auto& st = state();
    gpumem_shim_stats s{};
    s.mode = static_cast<int>(st.mode);
    s.chain_allocations = st.stats.chain_allocations.get();
    s.runtime_allocations = st.stats.runtime_allocations.get();
    s.chain_frees = st.stats.chain_frees.get();
    s.passthrough_allocations = st.stats.passthrough_allocations.get();
    s.passthrough_frees = st.stats.passthrough_frees.get();
    s.double_frees = st.stats.double_frees.get();
    s.failed_allocations = st.stats.failed_allocations.get();
    s.captured_passthroughs = st.stats.captured_passthroughs.get();
    s.ipc_refused = st.stats.ipc_refused.get();
    auto const [n, b] = registry().live_totals();
    s.live_allocations = n;
    s.live_bytes = b;
    s.active_captures = static_cast<unsigned long long>(gpumem::stream_tracker::capture_count());
    s.device_syncs = st.stats.device_syncs.get();
    s.ipc_parked_bytes = ipc_parked_bytes();
    for_each_chain([&](device_chain& c) {
      ++s.chains;
      s.reserved_bytes += static_cast<unsigned long long>(c.chain->device_stats().bytes().current);
      s.pending_free_bytes += c.chain->info().pending_bytes;
      s.reclaim_barriers += gpumem::stream_tracker::of(c.device).barrier_count();
    });
    *out = s;
    return 0;
  } catch (...) { return -1; }
}

namespace {

int fill_process_stats(process_memory which, gpumem_shim_host_stats* out) noexcept {
  if (out == nullptr) return -1;
  auto const t = process_chain_totals(which);
  gpumem_shim_host_stats s{};
  s.built = t.built ? 1 : 0;
  s.pooled = t.pooled ? 1 : 0;
  s.allocations = t.allocations;
  s.frees = t.frees;
  s.passthroughs = t.passthroughs;
  s.live_bytes = t.info.used_bytes;
  s.reserved_bytes = t.info.reserved_bytes;
  s.waiting_bytes = t.info.pending_bytes;
  s.fences = t.fences;
  s.waits = t.waits;
  *out = s;
  return 0;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int gpumem_shim_get_host_stats(gpumem_shim_host_stats* out) {
  return fill_process_stats(process_memory::pinned, out);
}

extern "C" __attribute__((visibility("default"))) int gpumem_shim_get_managed_stats(gpumem_shim_managed_stats* out) {
  return fill_process_stats(process_memory::managed, out);
}

extern "C" __attribute__((visibility("default"))) int gpumem_shim_describe_chain(int device, char* buf,
                                                                                 unsigned long len) {
  if (buf == nullptr || len == 0) return -1;
  try {
    std::string text;
    if (device_chain* c = built_chain(device)) text = c->chain->describe();
    std::size_t const n = text.size() < len - 1 ? text.size() : len - 1;
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
    return static_cast<int>(n);
  } catch (...) { return -1; }
}

extern "C" __attribute__((visibility("default"))) int gpumem_shim_trim(int device, unsigned long long keep,
                                                                       unsigned long long* released) {
  if (released != nullptr) *released = 0;
  if (device < -1 || device >= max_devices) return -1;
  if (!active()) return 0;  // no chain holds anything
  // A trim waits for the GPU, which would break a capture: refused, not skipped,
  // so that a caller who asked to give memory back learns it did not happen.
  if (gpumem::stream_tracker::capture_active()) return -1;
  int result = 0;
  unsigned long long total = 0;
  auto const one = [&](device_chain& c) {
    std::size_t n = 0;
    if (!trim_chain(c, static_cast<std::size_t>(keep), n, "gpumem_shim_trim")) result = -1;
    total += n;
  };
  if (device >= 0) {
    if (device_chain* c = built_chain(device)) one(*c);
  } else {
    for (int d = 0; d < max_devices; ++d) {
      if (device_chain* c = built_chain(d)) one(*c);
    }
  }
  if (released != nullptr) *released = total;
  return result;
}
