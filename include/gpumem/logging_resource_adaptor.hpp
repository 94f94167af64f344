#pragma once
// logging_resource_adaptor: one CSV row (see csv_log_writer.hpp) per allocate,
// failed allocate and deallocate passing through it.
//
// A failed allocate is logged as "allocate failure" with the error's CUresult
// name, then rethrown unchanged. Device and Entry come from call_context()
// (set by the shim); for library calls Entry is allocate/free and Device the
// current context's device. deallocate rows are written after the upstream
// returns, with the time the upstream took. Every call is logged as it passed
// through, allocate(0) (a "(nil)" allocate row) and deallocate(nullptr) included,
// so the log replays exactly what the program asked for. The Reserved column is
// left empty (the adaptor does not know what its chain holds from the device).
// Thread safety: as thread-safe as the upstream; the writer is lock-free on its
// fast path. Streams: passed through unchanged and logged.

#include <gpumem/csv_log_writer.hpp>
#include <gpumem/forwarding_resource_adaptor.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace gpumem {

class logging_resource_adaptor final : public forwarding_resource_adaptor {
 public:
  /// Logs to `sink` (may be shared by several adaptors). Throws logic_error on
  /// null upstream or sink.
  logging_resource_adaptor(device_memory_resource* upstream, std::shared_ptr<csv_log_writer> sink);
  /// Logs to a new csv_log_writer on `filename` (throws logic_error if it cannot
  /// be opened).
  logging_resource_adaptor(device_memory_resource* upstream, std::string const& filename);

  [[nodiscard]] csv_log_writer& writer() const noexcept { return *sink_; }
  [[nodiscard]] std::shared_ptr<csv_log_writer> const& sink() const noexcept { return sink_; }

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  /// A free asks the driver for the current device when no call context names it.
  [[nodiscard]] bool do_deallocate_calls_driver() const noexcept override { return true; }

  /// Writes one row; the event runs from `start_ticks` (detail::log_ticks()) to now.
  void log(log_action action, void const* p, std::size_t bytes, stream_ref stream, std::uint64_t start_ticks,
           const char* result) const noexcept;

  std::shared_ptr<csv_log_writer> sink_;
};

}  // namespace gpumem
