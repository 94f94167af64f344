#pragma once
// Streams, events and stream capture of the simulated device.
//
// Work is in flight until someone synchronizes: each stream keeps a FIFO of
// operations that run, on the synchronizing thread, only when a synchronization
// needs them (stream/event/context synchronize, a sync free, gpumemsim_run_all).
// A wait on an event runs the recording stream up to that record first. The
// legacy stream and blocking streams order against each other through implicit
// waits inserted when work is enqueued, within one context (a green context's
// streams order against its own legacy stream, not the primary context's).
//
// Thread safety: each stream has its own mutex; only one thread runs a stream's
// operations at a time (others wait for it), and no lock is held while an
// operation runs, so host functions may call back into the driver. A host
// function that synchronizes its own stream returns at once (it cannot wait for
// itself). Stream, event and capture objects are never deleted: a destroyed
// handle stays recognisable, so its use is reported instead of being undefined.

#include "state.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

namespace gpumemsim {

/// internal: a green context's recorder (cuGreenCtxRecordEvent); no handle, not
/// in the context's `streams`, orders against nothing implicitly.
enum class stream_kind { legacy, per_thread, user, internal };

struct stream;
struct event;
struct capture;

/// One queued operation. `wait_on` set: a dependency (runs `wait_on` until
/// operation number `wait_seq` completed); otherwise `work` runs.
struct operation {
  std::function<void()> work;
  stream* wait_on = nullptr;
  std::uint64_t wait_seq = 0;
};

struct stream {
  context* ctx = nullptr;
  stream_kind kind = stream_kind::user;
  unsigned flags = 0;
  int priority = 0;
  std::mutex mutex;
  std::condition_variable idle;
  std::deque<operation> queue;
  std::uint64_t enqueued = 0;  ///< operations ever queued
  std::uint64_t done = 0;      ///< operations completed (they complete in order)
  bool running = false;
  std::thread::id runner;
  bool destroyed = false;
  std::atomic<capture*> cap{nullptr};  ///< capture this stream takes part in

  bool blocking() const noexcept {
    return (kind == stream_kind::per_thread || kind == stream_kind::user) && (flags & CU_STREAM_NON_BLOCKING) == 0;
  }
};

struct event {
  context* ctx = nullptr;
  unsigned flags = 0;
  std::mutex mutex;
  bool destroyed = false;
  bool recorded = false;
  stream* on = nullptr;          ///< stream of the last record
  std::uint64_t seq = 0;         ///< its operation number there
  std::uint64_t generation = 0;  ///< bumps at each record
  capture* cap = nullptr;        ///< the last record was captured into this capture
  std::chrono::steady_clock::time_point when{};
};

/// A CUgraph made by stream capture: the recorded operations (never launched)
/// and the memory its allocation nodes own.
struct graph {
  int device = 0;
  std::vector<std::function<void()>> nodes;
  std::vector<std::uintptr_t> allocations;  ///< made by captured cuMemAllocAsync
  std::vector<std::uintptr_t> frees;        ///< captured cuMemFreeAsync
  bool destroyed = false;
};

struct capture {
  std::uint64_t id = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id thread;
  stream* origin = nullptr;
  graph* g = nullptr;
  bool active = true;  ///< false once ended
  bool invalidated = false;
  std::vector<stream*> members;
};

/// A new stream of `ctx`; a per-thread or user stream starts with the context's
/// start_waits queued.
stream* new_stream(context* ctx, stream_kind kind, unsigned flags, int priority);

/// Resolves a stream handle: 0 (legacy, or per-thread when `ptsz`), 0x1, 0x2,
/// or a created stream; needs a current context for the special handles. A
/// stream of a destroyed green context: CUDA_ERROR_CONTEXT_IS_DESTROYED (documented).
CUresult resolve_stream(CUstream h, bool ptsz, char const* entry, stream** out);
/// Resolves a created event handle.
CUresult resolve_event(CUevent h, char const* entry, event** out);

/// Queues `work` on `s` (or records it into the stream's capture). Returns the
/// capture error codes where CUDA gives them.
CUresult enqueue(stream* s, std::function<void()> work, bool* captured = nullptr, std::uint64_t* seq = nullptr);
/// Queues a dependency of `s` on operation `seq` of `other`.
CUresult enqueue_wait(stream* s, stream* other, std::uint64_t seq);
/// Queues on `s` a dependency on everything queued so far on every stream of
/// `ctx`, its legacy stream included.
CUresult enqueue_wait_context(stream* s, context* ctx);
/// Makes all later work of `ctx` wait for operation `seq` of `other`: a dependency
/// queued on every stream of `ctx` (legacy included), and kept in its start_waits
/// for streams made later.
CUresult context_wait(context* ctx, stream* other, std::uint64_t seq);
/// Records `e` on `s` (cuEventRecord once the handles are checked).
CUresult record_event(event* e, stream* s);

/// Runs `s` until operation `target` (exclusive) completed.
void run_until(stream* s, std::uint64_t target);
void run_all(stream* s);
/// Runs every stream of `ctx` (a green context's recorder included).
void run_context(context* ctx);
/// What cuCtxSynchronize waits for: run_context, and for a primary context also
/// its green contexts (documented).
void synchronize_context(context* ctx);
void run_everything();

/// Capture of `s` (nullptr when none); the caller must not hold `s`'s mutex.
capture* capture_of(stream* s);
/// Invalidates a capture (counts a violation once).
void invalidate(capture* c, char const* why);
/// Whether the calling thread may make a "potentially unsafe" call (sync alloc,
/// free, context synchronize). If not, invalidates the captures that forbid it
/// and returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
CUresult check_unsafe_call(char const* entry);
CUstreamCaptureMode& thread_capture_mode() noexcept;
/// Synchronizing a context with any capture in progress on it is illegal in
/// every mode (measured): invalidates those captures. A primary context's
/// synchronization covers its green contexts' captures too.
CUresult check_context_sync(context* ctx);
/// Refuses a context-wide operation (cuGreenCtxRecordEvent, cuGreenCtxWaitEvent)
/// while any stream of `ctx` takes part in a capture: invalidates those captures
/// and returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (documented).
CUresult refuse_context_capture(context* ctx, char const* why);

/// Destroys the streams of `ctx` and drops their pending work (primary context reset).
void reset_context_streams(context* ctx);

}  // namespace gpumemsim

namespace gpumemsim {

void destroy_stream(stream* s);
event* new_event(context* ctx, unsigned flags);
void destroy_event(event* e);

struct capture_info {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  std::uint64_t id = 0;
  graph* g = nullptr;
  capture* c = nullptr;
};

/// Guards every capture and graph object.
std::mutex& capture_mutex() noexcept;
CUresult begin_capture(stream* s, CUstreamCaptureMode mode);
/// Ends the capture `s` began; on CUDA_ERROR_STREAM_CAPTURE_INVALIDATED `*out`
/// is the dead graph for the caller to dispose of.
CUresult end_capture(stream* s, graph** out);
/// `s` waits on an event recorded in capture `c`: it joins the capture.
CUresult join_capture(stream* s, capture* c);
capture_info capture_status(stream* s);
/// Ends (invalidated) a capture that `s` began, when `s` is destroyed or reset;
/// returns its graph for discard_graph, or nullptr.
graph* abandon_capture(stream* s);
/// Frees what a graph owns (capture_api.cpp).
void discard_graph(graph* g);
/// Invalidates `c` if it is still active; true if it was.
bool invalidate_if_active(capture* c, char const* why);

}  // namespace gpumemsim
