#include "serve/notifications.hpp"

#include "observe/event_log.hpp"
#include "serve/allocation_registry.hpp"
#include "serve/device_chains.hpp"
#include "serve/ipc_sharing.hpp"
#include "serve/live_streams.hpp"
#include "serve/process_chains.hpp"
#include "serve/release.hpp"

#include <gpumem/stream_tracker.hpp>

#include <cstdint>
#include <utility>
#include <vector>

namespace gpumem::shim {

void notify_stream_destroyed(CUstream stream) noexcept {
  stream_gone(stream);
  for (int d = 0; d < stream_tracker::max_devices; ++d) stream_tracker::of(d).stream_destroying(stream);
  try {
    for_each_chain([stream](device_chain& c) {
      scoped_chain_context ctx{c};
      c.chain->top().stream_destroyed(stream_ref{stream});
    });
  } catch (...) {}
}

void forget_device(int device, const char* entry) noexcept {
  if (device < 0) return;
  stream_tracker::of(device).context_reset();
  try {
    // One pass: every live allocation of the device gets its free row, and the
    // managed chain's blocks (dead with the context) are collected for its books.
    bool const log = logging_enabled();
    std::vector<std::pair<void*, std::size_t>> managed;
    registry().for_each_live([&](std::uintptr_t p, allocation const& a) {
      if (a.device != device) return;
      if (log) {
        log_event(event_row(log_action::free, reinterpret_cast<void const*>(p), a.bytes, a.stream, device, entry,
                            CUDA_SUCCESS),
                  event_clock());
      }
      if (a.kind == alloc_kind::managed_chain) managed.emplace_back(reinterpret_cast<void*>(p), a.bytes);
    });
    forget_process_memory(device, managed);
    registry().drop_device(device);
  } catch (...) {}
  ipc_forget_device(device);  // before the chain retires: no parked block goes back to it
  drop_chain(device);
  forget_release_state(device);
}

}  // namespace gpumem::shim
