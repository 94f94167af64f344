// Driver entry points that change what the chains may do: stream creation (the
// device's stream_tracker must know every stream a reclamation barrier orders; the
// runtime creates its streams through these too), stream destruction (pools drop
// per-stream state first, the tracker remembers the stream's last work), stream
// capture (counted, so no barrier or sync ever touches a capture), green contexts
// (their streams use the pools' memory: a barrier must order all their work) and
// primary context reset (the device's chain and streams go).

#include "hooks/hook_macros.hpp"
#include "hooks/hook_table.hpp"
#include "serve/capture_guard.hpp"
#include "serve/device_chains.hpp"
#include "serve/live_streams.hpp"
#include "serve/notifications.hpp"
#include "serve/serve.hpp"
#include "shim_state.hpp"

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/stream_ordering.hpp>
#include <gpumem/stream_tracker.hpp>

#include <cuda.h>

namespace gpumem::shim {
namespace {

CUresult not_loaded() noexcept { return CUDA_ERROR_NOT_INITIALIZED; }

/// For counting captures: true only when the driver says `s` captures. A stream
/// whose state it cannot tell counts as not capturing: a capture end missed only
/// keeps reclamation barriers refused (pools grow instead), while an end counted
/// for a capture still running would let a barrier break it.
bool captures(CUstream s) noexcept { return detail::stream_capture_state(s) == detail::capture_state::capturing; }

/// Registers a stream the program just created in the current context: where it
/// lives (live_streams), and with its device's tracker if that context is the
/// device's primary context (the one the chains' memory lives in).
void track_created(CUstream s, unsigned flags) noexcept {
  if (!active() || s == nullptr) return;
  CUcontext ctx = nullptr;
  int const dev = current_device(ctx);
  stream_home home{ctx, dev, dev >= 0};
  if (dev < 0) {
    // Another context (made by cuCtxCreate, or a green context's): its device, so
    // that an allocation on the stream is never served from another device's memory.
    CUdevice d{};
    if (ctx != nullptr && detail::driver().cuCtxGetDevice(&d) == CUDA_SUCCESS) home.device = static_cast<int>(d);
  }
  stream_created(s, home);
  if (dev < 0) return;
  auto& tracker = stream_tracker::of(dev);
  if (tracker.is_primary(ctx)) tracker.stream_created(s, flags);
}

CUresult destroy_impl(CUstream s, hook_id id) noexcept {
  if (active()) notify_stream_destroyed(s);
  auto const f = real<CUresult (*)(CUstream)>(id);
  if (f == nullptr) return not_loaded();
  // Destroying a capturing stream ends its capture: keep the count true, or
  // reclamation barriers would be refused for ever.
  bool const ends_capture = stream_tracker::capture_active() && captures(s);
  CUresult const r = f(s);
  if (ends_capture && r == CUDA_SUCCESS) note_capture_ended();
  return r;
}

template <class Call>
CUresult begin_capture(Call&& call) noexcept {
  return stream_tracker::begin_capture(call);
}

template <hook_id id>
CUresult end_capture(CUstream s, CUgraph* graph) noexcept {
  auto const f = real<CUresult (*)(CUstream, CUgraph*)>(id);
  if (f == nullptr) return not_loaded();
  // Whether this ends a capture (also an invalidated one) is known only before;
  // a graph returned proves it did.
  bool const was_capturing = captures(per_thread_stream(id) ? ptsz_stream(s) : s);
  CUresult const r = f(s, graph);
  if (was_capturing || r == CUDA_SUCCESS) note_capture_ended();
  return r;
}

CUresult reset_impl(CUdevice dev, hook_id id) noexcept {
  if (active()) forget_device(static_cast<int>(dev), "cuDevicePrimaryCtxReset");  // the chain and the tracker's streams
  auto const f = real<CUresult (*)(CUdevice)>(id);
  return f != nullptr ? f(dev) : not_loaded();
}

using begin_v1_fn = CUresult (*)(CUstream);
using begin_v2_fn = CUresult (*)(CUstream, CUstreamCaptureMode);
using begin_graph_fn = CUresult (*)(CUstream, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, std::size_t,
                                    CUstreamCaptureMode);

}  // namespace
}  // namespace gpumem::shim

using namespace gpumem::shim;

GPUMEM_HOOK(CUresult, cuStreamCreate, (CUstream * s, unsigned int flags)) {
  auto const f = real<CUresult (*)(CUstream*, unsigned int)>(hook_id::h_cuStreamCreate);
  if (f == nullptr) return not_loaded();
  CUresult const r = f(s, flags);
  if (r == CUDA_SUCCESS && s != nullptr) track_created(*s, flags);
  return r;
}
GPUMEM_HOOK(CUresult, cuStreamCreateWithPriority, (CUstream * s, unsigned int flags, int priority)) {
  auto const f = real<CUresult (*)(CUstream*, unsigned int, int)>(hook_id::h_cuStreamCreateWithPriority);
  if (f == nullptr) return not_loaded();
  CUresult const r = f(s, flags, priority);
  if (r == CUDA_SUCCESS && s != nullptr) track_created(*s, flags);
  return r;
}

GPUMEM_HOOK(CUresult, cuStreamDestroy, (CUstream s)) { return destroy_impl(s, hook_id::h_cuStreamDestroy); }
GPUMEM_HOOK(CUresult, cuStreamDestroy_v2, (CUstream s)) { return destroy_impl(s, hook_id::h_cuStreamDestroy_v2); }

// v1 (CUDA 10.0 ABI): no mode argument.
GPUMEM_HOOK(CUresult, cuStreamBeginCapture, (CUstream s)) {
  auto const f = real<begin_v1_fn>(hook_id::h_cuStreamBeginCapture);
  return f != nullptr ? begin_capture([&] { return f(s); }) : not_loaded();
}
GPUMEM_HOOK(CUresult, cuStreamBeginCapture_ptsz, (CUstream s)) {
  auto const f = real<begin_v1_fn>(hook_id::h_cuStreamBeginCapture_ptsz);
  return f != nullptr ? begin_capture([&] { return f(s); }) : not_loaded();
}
GPUMEM_HOOK(CUresult, cuStreamBeginCapture_v2, (CUstream s, CUstreamCaptureMode mode)) {
  auto const f = real<begin_v2_fn>(hook_id::h_cuStreamBeginCapture_v2);
  return f != nullptr ? begin_capture([&] { return f(s, mode); }) : not_loaded();
}
GPUMEM_HOOK(CUresult, cuStreamBeginCapture_v2_ptsz, (CUstream s, CUstreamCaptureMode mode)) {
  auto const f = real<begin_v2_fn>(hook_id::h_cuStreamBeginCapture_v2_ptsz);
  return f != nullptr ? begin_capture([&] { return f(s, mode); }) : not_loaded();
}
GPUMEM_HOOK(CUresult, cuStreamBeginCaptureToGraph,
            (CUstream s, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* edges, std::size_t n,
             CUstreamCaptureMode mode)) {
  auto const f = real<begin_graph_fn>(hook_id::h_cuStreamBeginCaptureToGraph);
  return f != nullptr ? begin_capture([&] { return f(s, g, deps, edges, n, mode); }) : not_loaded();
}
GPUMEM_HOOK(CUresult, cuStreamBeginCaptureToGraph_ptsz,
            (CUstream s, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* edges, std::size_t n,
             CUstreamCaptureMode mode)) {
  auto const f = real<begin_graph_fn>(hook_id::h_cuStreamBeginCaptureToGraph_ptsz);
  return f != nullptr ? begin_capture([&] { return f(s, g, deps, edges, n, mode); }) : not_loaded();
}
GPUMEM_HOOK(CUresult, cuStreamEndCapture, (CUstream s, CUgraph* graph)) {
  return end_capture<hook_id::h_cuStreamEndCapture>(s, graph);
}
GPUMEM_HOOK(CUresult, cuStreamEndCapture_ptsz, (CUstream s, CUgraph* graph)) {
  return end_capture<hook_id::h_cuStreamEndCapture_ptsz>(s, graph);
}

GPUMEM_HOOK(CUresult, cuGreenCtxCreate, (CUgreenCtx * green, CUdevResourceDesc desc, CUdevice dev, unsigned flags)) {
  auto const f = real<CUresult (*)(CUgreenCtx*, CUdevResourceDesc, CUdevice, unsigned)>(hook_id::h_cuGreenCtxCreate);
  if (f == nullptr) return not_loaded();
  CUresult const r = f(green, desc, dev, flags);
  if (r == CUDA_SUCCESS && green != nullptr && active()) {
    gpumem::stream_tracker::of(static_cast<int>(dev)).green_context_created(*green);
  }
  return r;
}
GPUMEM_HOOK(CUresult, cuGreenCtxDestroy, (CUgreenCtx green)) {
  auto const f = real<CUresult (*)(CUgreenCtx)>(hook_id::h_cuGreenCtxDestroy);
  if (f == nullptr) return not_loaded();
  // Before the driver forgets it: its work still queued must be remembered.
  int known = -1;
  if (active()) {
    for (int d = 0; d < gpumem::stream_tracker::max_devices && known < 0; ++d) {
      if (gpumem::stream_tracker::of(d).green_context_destroying(green)) known = d;
    }
  }
  CUresult const r = f(green);
  // Refused: it lives on, and the barriers must go on ordering it.
  if (r != CUDA_SUCCESS && known >= 0) gpumem::stream_tracker::of(known).green_context_created(green);
  return r;
}

GPUMEM_HOOK(CUresult, cuDevicePrimaryCtxReset, (CUdevice dev)) {
  return reset_impl(dev, hook_id::h_cuDevicePrimaryCtxReset);
}
GPUMEM_HOOK(CUresult, cuDevicePrimaryCtxReset_v2, (CUdevice dev)) {
  return reset_impl(dev, hook_id::h_cuDevicePrimaryCtxReset_v2);
}
