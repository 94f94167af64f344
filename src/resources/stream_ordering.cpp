#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/stream_ordering.hpp>

#include <atomic>

namespace gpumem::detail {

std::uint64_t this_thread_tag() noexcept {
  static std::atomic<std::uint64_t> next{1};
  thread_local std::uint64_t const tag = next.fetch_add(1, std::memory_order_relaxed);
  return tag;
}

bool stream_identity::usable_from_this_thread() const noexcept {
  return owner_thread == 0 || owner_thread == this_thread_tag();
}

stream_identity identify(stream_ref s) noexcept {
  auto const key = stream_key(s);
  if (key == per_thread_stream_handle) {
    auto const tag = this_thread_tag();
    return {(tag << 3) | per_thread_stream_handle, reinterpret_cast<CUstream>(per_thread_stream_handle), tag};
  }
  return {key, reinterpret_cast<CUstream>(key), 0};
}

capture_state stream_capture_state(CUstream s) noexcept {
  auto const& d = driver();
  if (d.init_result != CUDA_SUCCESS || d.cuStreamIsCapturing == nullptr) return capture_state::unknown;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult const r = d.cuStreamIsCapturing(s, &status);
  // No current context: nothing this thread names can be capturing (and any
  // event record or wait would fail on its own).
  if (r == CUDA_ERROR_INVALID_CONTEXT) return capture_state::none;
  if (r != CUDA_SUCCESS) return capture_state::unknown;
  return status == CU_STREAM_CAPTURE_STATUS_NONE ? capture_state::none : capture_state::capturing;
}

CUresult record_event(CUevent& ev, CUstream s) noexcept {
  auto const& d = driver();
  if (d.init_result != CUDA_SUCCESS) return d.init_result;
  if (ev == nullptr) {
    if (CUresult r = d.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING); r != CUDA_SUCCESS) {
      ev = nullptr;
      return r;
    }
  }
  return d.cuEventRecord(ev, s);
}

CUresult wait_event(CUstream s, CUevent ev) noexcept {
  auto const& d = driver();
  if (d.init_result != CUDA_SUCCESS) return d.init_result;
  return d.cuStreamWaitEvent(s, ev, 0);
}

CUresult order_after(CUevent& ev, CUstream from, CUstream to) noexcept {
  if (CUresult r = record_event(ev, from); r != CUDA_SUCCESS) return r;
  return wait_event(to, ev);
}

CUresult query_event(CUevent ev) noexcept {
  auto const& d = driver();
  if (d.init_result != CUDA_SUCCESS) return d.init_result;
  return d.cuEventQuery(ev);
}

void destroy_event(CUevent& ev) noexcept {
  if (ev == nullptr) return;
  auto const& d = driver();
  // The destroy result is not actionable: a failing destroy leaks one event.
  if (d.init_result == CUDA_SUCCESS) static_cast<void>(d.cuEventDestroy(ev));
  ev = nullptr;
}

}  // namespace gpumem::detail
