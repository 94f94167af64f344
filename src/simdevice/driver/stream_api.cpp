// Streams, events, host functions.

#include "stream.hpp"

using namespace gpumemsim;

namespace gpumemsim {

CUresult record_event(event* e, stream* s) {
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(e->mutex);
    generation = ++e->generation;
  }
  bool captured = false;
  std::uint64_t seq = 0;
  CUresult r = enqueue(
      s,
      [e, generation] {
        std::lock_guard lock(e->mutex);
        if (e->generation == generation) e->when = std::chrono::steady_clock::now();
      },
      &captured, &seq);
  if (r != CUDA_SUCCESS) return r;
  capture_info const c = captured ? capture_status(s) : capture_info{};
  std::lock_guard lock(e->mutex);
  if (e->generation != generation) return CUDA_SUCCESS;  // a later record won the race
  e->recorded = true;
  e->on = captured ? nullptr : s;
  e->seq = seq;
  e->cap = captured ? c.c : nullptr;
  return CUDA_SUCCESS;
}

}  // namespace gpumemsim

namespace {

CUresult create_stream(CUstream* out, unsigned flags, int priority) {
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) return CUDA_ERROR_INVALID_VALUE;
  // Priorities clamp to the device's range [-5, 0], as in CUDA.
  priority = priority > 0 ? 0 : (priority < -5 ? -5 : priority);
  *out = reinterpret_cast<CUstream>(new_stream(ctx, stream_kind::user, flags, priority));
  return CUDA_SUCCESS;
}

// Waits for everything queued on `s` so far. Synchronizing the legacy stream
// also waits for all earlier work of blocking streams (measured): it syncs
// through a marker operation, which picks up those implicit dependencies.
CUresult synchronize(stream* s, char const* entry) {
  if (capture_info const c = capture_status(s); c.status != CU_STREAM_CAPTURE_STATUS_NONE) {
    invalidate_if_active(c.c, "synchronize of a capturing stream");
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (CUresult r = check_unsafe_call(entry); r != CUDA_SUCCESS) return r;
  if (s->kind == stream_kind::legacy) {
    std::uint64_t seq = 0;
    if (CUresult r = enqueue(
            s, [] {}, nullptr, &seq);
        r != CUDA_SUCCESS)
      return r;
    run_until(s, seq + 1);
  } else {
    run_all(s);
  }
  return CUDA_SUCCESS;
}

CUresult stream_sync(CUstream h, bool ptsz, char const* entry) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  return synchronize(s, entry);
}

CUresult stream_query(CUstream h, bool ptsz, char const* entry) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  if (capture_info const c = capture_status(s); c.status != CU_STREAM_CAPTURE_STATUS_NONE) {
    invalidate_if_active(c.c, "query of a capturing stream");
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (CUresult r = check_unsafe_call(entry); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(s->mutex);
  return s->done == s->enqueued ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult stream_wait_event(CUstream h, CUevent he, unsigned flags, bool ptsz, char const* entry) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  event* e = nullptr;
  if (CUresult r = resolve_event(he, entry, &e); r != CUDA_SUCCESS) return r;
  if ((flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) != 0) return CUDA_ERROR_INVALID_VALUE;
  stream* on = nullptr;
  std::uint64_t seq = 0;
  capture* cap = nullptr;
  bool recorded = false;
  {
    std::lock_guard lock(e->mutex);
    on = e->on;
    seq = e->seq;
    cap = e->cap;
    recorded = e->recorded;
  }
  capture_info const mine = capture_status(s);
  if (mine.status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (cap != nullptr) return join_capture(s, cap);  // a captured record: s joins that capture
  if (mine.status == CU_STREAM_CAPTURE_STATUS_ACTIVE && recorded) {
    // Measured: CUDA_ERROR_STREAM_CAPTURE_ISOLATION (that it invalidates is guessed).
    invalidate_if_active(mine.c, "wait on an event recorded outside the capture");
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  }
  if (mine.status == CU_STREAM_CAPTURE_STATUS_ACTIVE || !recorded || on == nullptr) return CUDA_SUCCESS;
  return enqueue_wait(s, on, seq);
}

CUresult launch_host(CUstream h, CUhostFn fn, void* data, bool ptsz, char const* entry) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return enqueue(s, [fn, data] { fn(data); });
}

CUresult add_callback(CUstream h, CUstreamCallback cb, void* data, unsigned flags, bool ptsz, char const* entry) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  if (cb == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return enqueue(s, [cb, data, h] { cb(h, CUDA_SUCCESS, data); });
}

CUresult event_record(CUevent he, CUstream h, bool ptsz, char const* entry) {
  event* e = nullptr;
  if (CUresult r = resolve_event(he, entry, &e); r != CUDA_SUCCESS) return r;
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  // As CUDA: an event is recorded only on a stream of its own context. A green
  // context's streams count as its primary context's (measured on an H100, driver
  // 580: an event of the primary context records on a green context's stream).
  if (base_context(e->ctx) != base_context(s->ctx)) return CUDA_ERROR_INVALID_HANDLE;
  return record_event(e, s);
}

// Where the event's last record is. Querying a captured event is illegal; any
// other event query/sync is an unsafe call during capture (measured).
CUresult event_state(event* e, char const* why, char const* entry, stream** on, std::uint64_t* seq) {
  capture* cap = nullptr;
  {
    std::lock_guard lock(e->mutex);
    cap = e->cap;
    *on = e->on;
    *seq = e->seq;
  }
  if (cap != nullptr && invalidate_if_active(cap, why)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return check_unsafe_call(entry);
}

}  // namespace

CUresult cuStreamCreate(CUstream* out, unsigned int flags) {
  SIM_ENTRY("cuStreamCreate");
  return create_stream(out, flags, 0);
}

CUresult cuStreamCreateWithPriority(CUstream* out, unsigned int flags, int priority) {
  SIM_ENTRY("cuStreamCreateWithPriority");
  return create_stream(out, flags, priority);
}

CUresult cuStreamDestroy_v2(CUstream h) {
  SIM_ENTRY("cuStreamDestroy_v2");
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    SIM_REQUIRE_INIT();
    return CUDA_ERROR_INVALID_HANDLE;
  }
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, false, "cuStreamDestroy_v2", &s); r != CUDA_SUCCESS) return r;
  if (graph* g = abandon_capture(s); g != nullptr) discard_graph(g);  // edge_cases.md: guessed
  destroy_stream(s);
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream h) {
  SIM_ENTRY("cuStreamSynchronize");
  return stream_sync(h, false, "cuStreamSynchronize");
}
SIM_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream h) {
  SIM_ENTRY("cuStreamSynchronize_ptsz");
  return stream_sync(h, true, "cuStreamSynchronize_ptsz");
}

CUresult cuStreamQuery(CUstream h) {
  SIM_ENTRY("cuStreamQuery");
  return stream_query(h, false, "cuStreamQuery");
}
SIM_EXPORT CUresult cuStreamQuery_ptsz(CUstream h) {
  SIM_ENTRY("cuStreamQuery_ptsz");
  return stream_query(h, true, "cuStreamQuery_ptsz");
}

CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags) {
  SIM_ENTRY("cuStreamWaitEvent");
  return stream_wait_event(h, e, flags, false, "cuStreamWaitEvent");
}
SIM_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int flags) {
  SIM_ENTRY("cuStreamWaitEvent_ptsz");
  return stream_wait_event(h, e, flags, true, "cuStreamWaitEvent_ptsz");
}

namespace {
CUresult stream_flags(CUstream h, unsigned* flags, bool ptsz, char const* entry) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = s->flags;
  return CUDA_SUCCESS;
}
CUresult stream_ctx(CUstream h, CUcontext* ctx, bool ptsz, char const* entry) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // A green context's stream answers its primary context (measured on an H100,
  // driver 580: not the green context's own CUcontext).
  *ctx = to_handle(base_context(s->ctx));
  return CUDA_SUCCESS;
}
}  // namespace

CUresult cuStreamGetFlags(CUstream h, unsigned int* flags) {
  SIM_ENTRY("cuStreamGetFlags");
  return stream_flags(h, flags, false, "cuStreamGetFlags");
}
SIM_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream h, unsigned int* flags) {
  SIM_ENTRY("cuStreamGetFlags_ptsz");
  return stream_flags(h, flags, true, "cuStreamGetFlags_ptsz");
}

CUresult cuStreamGetPriority(CUstream h, int* priority) {
  SIM_ENTRY("cuStreamGetPriority");
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, false, "cuStreamGetPriority", &s); r != CUDA_SUCCESS) return r;
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *priority = s->priority;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetCtx(CUstream h, CUcontext* ctx) {
  SIM_ENTRY("cuStreamGetCtx");
  return stream_ctx(h, ctx, false, "cuStreamGetCtx");
}
SIM_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream h, CUcontext* ctx) {
  SIM_ENTRY("cuStreamGetCtx_ptsz");
  return stream_ctx(h, ctx, true, "cuStreamGetCtx_ptsz");
}

CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void* data) {
  SIM_ENTRY("cuLaunchHostFunc");
  return launch_host(h, fn, data, false, "cuLaunchHostFunc");
}
SIM_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void* data) {
  SIM_ENTRY("cuLaunchHostFunc_ptsz");
  return launch_host(h, fn, data, true, "cuLaunchHostFunc_ptsz");
}

CUresult cuStreamAddCallback(CUstream h, CUstreamCallback cb, void* data, unsigned int flags) {
  SIM_ENTRY("cuStreamAddCallback");
  return add_callback(h, cb, data, flags, false, "cuStreamAddCallback");
}
SIM_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback cb, void* data, unsigned int flags) {
  SIM_ENTRY("cuStreamAddCallback_ptsz");
  return add_callback(h, cb, data, flags, true, "cuStreamAddCallback_ptsz");
}

CUresult cuEventCreate(CUevent* out, unsigned int flags) {
  SIM_ENTRY("cuEventCreate");
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned const known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if ((flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  // CUDA requires interprocess events to disable timing.
  if ((flags & CU_EVENT_INTERPROCESS) != 0 && (flags & CU_EVENT_DISABLE_TIMING) == 0) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUevent>(new_event(ctx, flags));
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent h) {
  SIM_ENTRY("cuEventDestroy_v2");
  event* e = nullptr;
  if (CUresult r = resolve_event(h, "cuEventDestroy_v2", &e); r != CUDA_SUCCESS) return r;
  destroy_event(e);
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent e, CUstream h) {
  SIM_ENTRY("cuEventRecord");
  return event_record(e, h, false, "cuEventRecord");
}
SIM_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream h) {
  SIM_ENTRY("cuEventRecord_ptsz");
  return event_record(e, h, true, "cuEventRecord_ptsz");
}

CUresult cuEventRecordWithFlags(CUevent e, CUstream h, unsigned int flags) {
  SIM_ENTRY("cuEventRecordWithFlags");
  if ((flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) != 0) return CUDA_ERROR_INVALID_VALUE;
  return event_record(e, h, false, "cuEventRecordWithFlags");
}

CUresult cuEventQuery(CUevent h) {
  SIM_ENTRY("cuEventQuery");
  event* e = nullptr;
  if (CUresult r = resolve_event(h, "cuEventQuery", &e); r != CUDA_SUCCESS) return r;
  stream* on = nullptr;
  std::uint64_t seq = 0;
  if (CUresult r = event_state(e, "query of an event recorded in the capture", "cuEventQuery", &on, &seq);
      r != CUDA_SUCCESS)
    return r;
  if (on == nullptr) return CUDA_SUCCESS;
  std::lock_guard lock(on->mutex);
  return on->done > seq ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent h) {
  SIM_ENTRY("cuEventSynchronize");
  event* e = nullptr;
  if (CUresult r = resolve_event(h, "cuEventSynchronize", &e); r != CUDA_SUCCESS) return r;
  stream* on = nullptr;
  std::uint64_t seq = 0;
  if (CUresult r = event_state(e, "synchronize of an event recorded in the capture", "cuEventSynchronize", &on, &seq);
      r != CUDA_SUCCESS)
    return r;
  if (on != nullptr) run_until(on, seq + 1);
  return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  SIM_ENTRY("cuEventElapsedTime_v2");
  event* a = nullptr;
  event* b = nullptr;
  if (CUresult r = resolve_event(start, "cuEventElapsedTime_v2", &a); r != CUDA_SUCCESS) return r;
  if (CUresult r = resolve_event(end, "cuEventElapsedTime_v2", &b); r != CUDA_SUCCESS) return r;
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::chrono::steady_clock::time_point t[2];
  event* both[2] = {a, b};
  for (int i = 0; i < 2; ++i) {
    event* e = both[i];
    stream* on = nullptr;
    std::uint64_t seq = 0;
    {
      std::lock_guard lock(e->mutex);
      if ((e->flags & CU_EVENT_DISABLE_TIMING) != 0 || !e->recorded || e->on == nullptr)
        return CUDA_ERROR_INVALID_HANDLE;
      on = e->on;
      seq = e->seq;
      t[i] = e->when;
    }
    std::lock_guard lock(on->mutex);
    if (on->done <= seq) return CUDA_ERROR_NOT_READY;
  }
  // Re-read: the timestamps are written when the records run.
  {
    std::lock_guard lock(a->mutex);
    t[0] = a->when;
  }
  {
    std::lock_guard lock(b->mutex);
    t[1] = b->when;
  }
  *ms = std::chrono::duration<float, std::milli>(t[1] - t[0]).count();
  return CUDA_SUCCESS;
}

// The pre-13.0 ABI name, still exported by the driver (cuda.h maps the name to _v2).
#undef cuEventElapsedTime
SIM_EXPORT CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  SIM_ENTRY("cuEventElapsedTime");
  return cuEventElapsedTime_v2(ms, start, end);
}
