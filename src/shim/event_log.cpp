#include "event_log.hpp"

#include "device_chains.hpp"
#include "shim_state.hpp"

#include <gpumem/config.hpp>
#include <gpumem/detail/os_thread.hpp>
#include <gpumem/error.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gpumem::shim {
namespace {

struct log_sinks {
  std::mutex mtx;
  // Slot max_devices: events whose device is unknown.
  std::array<std::atomic<csv_log_writer*>, max_devices + 1> by_device{};
  std::vector<std::unique_ptr<csv_log_writer>> writers;  // never destroyed (exit-time rows)
  bool failed = false;
};

log_sinks& sinks() noexcept {
  static auto* const s = new log_sinks{};
  return *s;
}

csv_log_writer* writer_for(int device) noexcept {
  auto const slot = static_cast<std::size_t>(device >= 0 && device < max_devices ? device : max_devices);
  auto& s = sinks();
  if (auto* w = s.by_device[slot].load(std::memory_order_acquire)) return w;
  std::lock_guard lock{s.mtx};
  if (auto* w = s.by_device[slot].load(std::memory_order_acquire)) return w;
  if (s.failed) return nullptr;
  try {
    auto const path = config::expand_template(state().settings.log_file, device < 0 ? 0 : device);
    csv_log_writer* w = nullptr;
    for (auto const& existing : s.writers) {
      if (existing->path() == path) w = existing.get();
    }
    if (w == nullptr) {
      s.writers.push_back(std::make_unique<csv_log_writer>(path));
      w = s.writers.back().get();
    }
    s.by_device[slot].store(w, std::memory_order_release);
    return w;
  } catch (std::exception const& e) {
    s.failed = true;  // one message, not one per event
    message(level::error, "cannot write the allocation log: %s", e.what());
    return nullptr;
  }
}

}  // namespace

bool logging_enabled() noexcept {
  static bool const on = !state().settings.log_file.empty() && state().mode == shim_mode::active;
  return on;
}

std::int64_t event_clock() noexcept { return logging_enabled() ? detail::realtime_ns() : 0; }

void log_event(event const& e) noexcept {
  if (!logging_enabled()) return;
  auto* w = writer_for(e.device);
  if (w == nullptr) return;
  auto const end = detail::realtime_ns();
  log_row row{.thread_id = detail::os_thread_id(),
              .time_ns = e.start_ns,
              .utc_offset_s = detail::local_utc_offset(e.start_ns),
              .action = e.action,
              .pointer = e.pointer,
              .size = e.size,
              .stream = reinterpret_cast<std::uintptr_t>(e.stream),
              .device = e.device,
              .entry = e.entry,
              .duration_ns = static_cast<std::uint64_t>(std::max<std::int64_t>(end - e.start_ns, 0)),
              .result = e.result == CUDA_SUCCESS ? nullptr : result_name(e.result)};
  w->write(row);
}

}  // namespace gpumem::shim
