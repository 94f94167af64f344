#include <gpumem/call_context.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/log_clock.hpp>
#include <gpumem/detail/os_thread.hpp>
#include <gpumem/logging_resource_adaptor.hpp>

namespace gpumem {

logging_resource_adaptor::logging_resource_adaptor(device_memory_resource* upstream,
                                                   std::shared_ptr<csv_log_writer> sink)
    : forwarding_resource_adaptor{upstream, "logging_resource_adaptor"}, sink_{std::move(sink)} {
  if (sink_ == nullptr) throw logic_error{"gpumem: logging_resource_adaptor needs a csv_log_writer"};
}

logging_resource_adaptor::logging_resource_adaptor(device_memory_resource* upstream, std::string const& filename)
    : logging_resource_adaptor{upstream, std::make_shared<csv_log_writer>(filename)} {}

void logging_resource_adaptor::log(log_action action, void const* p, std::size_t bytes, stream_ref stream,
                                   std::uint64_t start_ticks, const char* result) const noexcept {
  auto const end_ticks = detail::log_ticks();
  auto const& ctx = current_call();
  log_row const row{.thread_id = detail::os_thread_id(),
                    .action = action,
                    .pointer = reinterpret_cast<std::uintptr_t>(p),
                    .size = bytes,
                    .stream = stream_handle(stream),
                    .device = ctx.device >= 0 ? ctx.device : detail::current_device(),
                    .entry = ctx.entry_point,
                    .result = result};
  // Never 0 (which would mean "not measured"): the counter runs from boot.
  sink_->write(row, start_ticks, end_ticks == 0 ? 1 : end_ticks);
}

void* logging_resource_adaptor::do_allocate(std::size_t bytes, stream_ref stream) {
  auto const start = detail::log_ticks();
  void* p = nullptr;
  try {
    p = get_upstream()->allocate(bytes, stream);
  } catch (bad_alloc const& e) {
    log(log_action::allocate_failure, nullptr, bytes, stream, start, result_name(e.code()));
    throw;
  } catch (cuda_error const& e) {
    log(log_action::allocate_failure, nullptr, bytes, stream, start, result_name(e.code()));
    throw;
  } catch (logic_error const&) {
    log(log_action::allocate_failure, nullptr, bytes, stream, start, result_name(logic_error::code()));
    throw;
  } catch (...) {
    log(log_action::allocate_failure, nullptr, bytes, stream, start, "CUDA_ERROR_UNKNOWN");
    throw;
  }
  log(log_action::allocate, p, bytes, stream, start, nullptr);
  return p;
}

void logging_resource_adaptor::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  auto const start = detail::log_ticks();
  get_upstream()->deallocate(p, bytes, stream);
  log(log_action::free, p, bytes, stream, start, nullptr);
}

}  // namespace gpumem
