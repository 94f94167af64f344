#include "stream.hpp"

#include <algorithm>
#include <memory>
#include <unordered_set>

namespace gpumemsim {
namespace {

// Handle registries: live handles resolve, destroyed ones are reported.
struct registry {
  std::mutex mutex;
  std::unordered_set<void const*> live;
  std::unordered_set<void const*> dead;
};
registry& streams_registry() {
  static auto* r = new registry;
  return *r;
}
registry& events_registry() {
  static auto* r = new registry;
  return *r;
}

// Capture bookkeeping is rare and cross-cutting: one mutex guards every capture.
std::mutex g_capture_mutex;
std::vector<capture*> g_active_captures;
// Every capture ever begun: events recorded into a capture keep pointing at it after
// it ended, so captures live as long as the process (owned here, never freed).
std::vector<std::unique_ptr<capture>>& all_captures() {
  static auto* v = new std::vector<std::unique_ptr<capture>>;
  return *v;
}

// Per-thread default streams, one per context; marked destroyed when the thread
// exits so contexts can drop them once drained.
struct per_thread_streams {
  std::vector<std::pair<context*, stream*>> by_context;
  ~per_thread_streams() {
    for (auto const& [ctx, s] : by_context) {
      std::lock_guard lock(s->mutex);
      s->destroyed = true;
    }
  }
};
per_thread_streams& thread_streams() {
  thread_local per_thread_streams t;
  return t;
}

stream* per_thread_stream(context* ctx) {
  auto& v = thread_streams().by_context;
  auto it = std::find_if(v.begin(), v.end(), [ctx](auto const& e) { return e.first == ctx; });
  if (it != v.end()) {
    std::lock_guard lock(it->second->mutex);
    if (!it->second->destroyed) return it->second;
  }
  stream* s = new_stream(ctx, stream_kind::per_thread, 0, 0);
  if (it != v.end()) {
    it->second = s;
  } else {
    v.emplace_back(ctx, s);
  }
  return s;
}

std::vector<stream*> streams_of(context* ctx) {
  std::lock_guard lock(ctx->mutex);
  return ctx->streams;
}

// The last queued operation of `s` if it has not completed.
bool pending_tail(stream* s, std::uint64_t* seq) {
  std::lock_guard lock(s->mutex);
  if (s->enqueued == s->done) return false;
  *seq = s->enqueued - 1;
  return true;
}

}  // namespace

stream* new_stream(context* ctx, stream_kind kind, unsigned flags, int priority) {
  auto* s = new stream;
  s->ctx = ctx;
  s->kind = kind;
  s->flags = flags;
  s->priority = priority;
  if (kind == stream_kind::per_thread || kind == stream_kind::user) {
    std::lock_guard lock(ctx->mutex);
    ctx->streams.push_back(s);
    // Not yet visible to other threads: no stream lock needed.
    for (auto const& [other, seq] : ctx->start_waits) {
      operation w;
      w.wait_on = other;
      w.wait_seq = seq;
      s->queue.push_back(std::move(w));
      ++s->enqueued;
    }
  }
  if (kind == stream_kind::user) {
    auto& r = streams_registry();
    std::lock_guard lock(r.mutex);
    r.live.insert(s);
  }
  return s;
}

void destroy_stream(stream* s) {
  {
    auto& r = streams_registry();
    std::lock_guard lock(r.mutex);
    r.live.erase(s);
    r.dead.insert(s);
  }
  std::lock_guard lock(s->mutex);
  s->destroyed = true;  // pending work still runs, as on a GPU
}

event* new_event(context* ctx, unsigned flags) {
  auto* e = new event;
  e->ctx = ctx;
  e->flags = flags;
  auto& r = events_registry();
  std::lock_guard lock(r.mutex);
  r.live.insert(e);
  return e;
}

void destroy_event(event* e) {
  auto& r = events_registry();
  std::lock_guard lock(r.mutex);
  r.live.erase(e);
  r.dead.insert(e);
  e->destroyed = true;
}

CUresult resolve_stream(CUstream h, bool ptsz, char const* entry, stream** out) {
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    context* ctx = nullptr;
    if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
    bool const per_thread = h == CU_STREAM_PER_THREAD || (h == nullptr && ptsz);
    *out = per_thread ? per_thread_stream(ctx) : ctx->legacy;
    return CUDA_SUCCESS;
  }
  if (CUresult r = init_status(); r != CUDA_SUCCESS) return r;
  auto* s = reinterpret_cast<stream*>(h);
  {
    auto& r = streams_registry();
    std::lock_guard lock(r.mutex);
    if (r.live.count(h) == 0) {
      if (r.dead.count(h) != 0) violation("use of destroyed stream %p (%s)", static_cast<void*>(h), entry);
      return CUDA_ERROR_INVALID_HANDLE;
    }
  }
  // Streams of a created context die with it; a green context's outlive it.
  if (s->ctx->is_destroyed()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = s;
  return CUDA_SUCCESS;
}

CUresult resolve_event(CUevent h, char const* entry, event** out) {
  if (CUresult r = init_status(); r != CUDA_SUCCESS) return r;
  if (h == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto& r = events_registry();
  std::lock_guard lock(r.mutex);
  if (r.live.count(h) != 0) {
    *out = reinterpret_cast<event*>(h);
    return CUDA_SUCCESS;
  }
  if (r.dead.count(h) != 0) violation("use of destroyed event %p (%s)", static_cast<void*>(h), entry);
  return CUDA_ERROR_INVALID_HANDLE;
}

capture* capture_of(stream* s) { return s->cap.load(std::memory_order_acquire); }

void invalidate(capture* c, char const* why) {
  // Caller holds g_capture_mutex or passes a capture it just read; re-lock-free.
  if (c->invalidated) return;
  c->invalidated = true;
  violation("stream capture %llu invalidated: %s", static_cast<unsigned long long>(c->id), why);
}

namespace {

CUresult push(stream* s, std::vector<std::pair<stream*, std::uint64_t>> const& deps, std::function<void()> work,
              std::uint64_t* seq) {
  std::lock_guard lock(s->mutex);
  for (auto const& [other, other_seq] : deps) {
    operation w;
    w.wait_on = other;
    w.wait_seq = other_seq;
    s->queue.push_back(std::move(w));
    ++s->enqueued;
  }
  operation op;
  op.work = std::move(work);
  s->queue.push_back(std::move(op));
  if (seq != nullptr) *seq = s->enqueued;
  ++s->enqueued;
  return CUDA_SUCCESS;
}

// Legacy-stream semantics: work on the legacy stream waits for every blocking
// stream of the context; work on a blocking stream waits for the legacy stream.
CUresult implicit_dependencies(stream* s, std::vector<std::pair<stream*, std::uint64_t>>* deps) {
  std::uint64_t seq = 0;
  if (s->kind == stream_kind::legacy) {
    for (stream* b : streams_of(s->ctx)) {
      if (!b->blocking()) continue;
      if (capture* c = capture_of(b); c != nullptr) {
        std::lock_guard lock(g_capture_mutex);
        if (c->active) {
          invalidate(c, "the legacy stream was used while a blocking stream was capturing");
          return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
      }
      if (pending_tail(b, &seq)) deps->emplace_back(b, seq);
    }
  } else if (s->blocking() && pending_tail(s->ctx->legacy, &seq)) {
    deps->emplace_back(s->ctx->legacy, seq);
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult enqueue(stream* s, std::function<void()> work, bool* captured, std::uint64_t* seq) {
  if (captured != nullptr) *captured = false;
  if (capture* c = capture_of(s); c != nullptr) {
    std::lock_guard lock(g_capture_mutex);
    if (c->active) {
      if (c->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      c->g->nodes.push_back(std::move(work));
      if (captured != nullptr) *captured = true;
      return CUDA_SUCCESS;
    }
  }
  std::vector<std::pair<stream*, std::uint64_t>> deps;
  if (CUresult r = implicit_dependencies(s, &deps); r != CUDA_SUCCESS) return r;
  return push(s, deps, std::move(work), seq);
}

CUresult enqueue_wait(stream* s, stream* other, std::uint64_t seq) {
  std::vector<std::pair<stream*, std::uint64_t>> deps;
  if (CUresult r = implicit_dependencies(s, &deps); r != CUDA_SUCCESS) return r;
  deps.emplace_back(other, seq);
  std::lock_guard lock(s->mutex);
  for (auto const& [o, o_seq] : deps) {
    operation w;
    w.wait_on = o;
    w.wait_seq = o_seq;
    s->queue.push_back(std::move(w));
    ++s->enqueued;
  }
  return CUDA_SUCCESS;
}

CUresult enqueue_wait_context(stream* s, context* ctx) {
  std::vector<stream*> all = streams_of(ctx);
  all.push_back(ctx->legacy);
  std::uint64_t seq = 0;
  for (stream* other : all) {
    if (!pending_tail(other, &seq)) continue;
    if (CUresult r = enqueue_wait(s, other, seq); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult context_wait(context* ctx, stream* other, std::uint64_t seq) {
  std::vector<stream*> all;
  {
    // One critical section with new_stream's: a stream made meanwhile is either
    // in `all` or starts with the wait.
    std::lock_guard lock(ctx->mutex);
    auto& waits = ctx->start_waits;
    auto it = std::find_if(waits.begin(), waits.end(), [other](auto const& w) { return w.first == other; });
    if (it == waits.end()) {
      waits.emplace_back(other, seq);
    } else {
      it->second = std::max(it->second, seq);  // a stream's operations complete in order
    }
    all = ctx->streams;
  }
  all.push_back(ctx->legacy);
  for (stream* s : all) {
    {
      std::lock_guard lock(s->mutex);
      if (s->destroyed) continue;
    }
    if (CUresult r = enqueue_wait(s, other, seq); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

void run_until(stream* s, std::uint64_t target) {
  auto const me = std::this_thread::get_id();
  std::unique_lock lock(s->mutex);
  while (s->done < target && !s->queue.empty()) {
    if (s->running) {
      if (s->runner == me) return;  // a host function synchronizing its own stream
      s->idle.wait(lock);
      continue;
    }
    operation op = std::move(s->queue.front());
    s->queue.pop_front();
    s->running = true;
    s->runner = me;
    lock.unlock();
    if (op.wait_on != nullptr) {
      run_until(op.wait_on, op.wait_seq + 1);
    } else if (op.work) {
      op.work();
    }
    lock.lock();
    s->running = false;
    ++s->done;
    s->idle.notify_all();
  }
  // Another thread may still be running the last operation we need.
  while (s->done < target && s->running && s->runner != me) s->idle.wait(lock);
}

void run_all(stream* s) {
  std::uint64_t target = 0;
  {
    std::lock_guard lock(s->mutex);
    target = s->enqueued;
  }
  run_until(s, target);
}

void run_context(context* ctx) {
  run_all(ctx->legacy);
  for (stream* s : streams_of(ctx)) run_all(s);
  if (ctx->recorder != nullptr) run_all(ctx->recorder);
  // Forget destroyed streams whose work is done.
  std::lock_guard lock(ctx->mutex);
  std::erase_if(ctx->streams, [](stream* s) {
    std::lock_guard slock(s->mutex);
    return s->destroyed && s->done == s->enqueued;
  });
}

void synchronize_context(context* ctx) {
  run_context(ctx);
  if (!ctx->primary) return;
  for (context* g : green_contexts_of(ctx)) run_context(g);
}

void run_everything() {
  for (context* c : all_contexts()) run_context(c);
}

CUstreamCaptureMode& thread_capture_mode() noexcept {
  thread_local CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  return mode;
}

CUresult check_unsafe_call(char const* entry) {
  CUstreamCaptureMode const mode = thread_capture_mode();
  if (mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  auto const me = std::this_thread::get_id();
  std::lock_guard lock(g_capture_mutex);
  bool forbidden = false;
  for (capture* c : g_active_captures) {
    // An invalidated capture still forbids until it is ended (measured).
    if (c->mode == CU_STREAM_CAPTURE_MODE_RELAXED) continue;
    bool const forbids = (c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL && mode == CU_STREAM_CAPTURE_MODE_GLOBAL) ||
                         c->thread == me;
    if (!forbids) continue;
    forbidden = true;
    char why[128];
    std::snprintf(why, sizeof why, "unsafe call %s during capture", entry);
    invalidate(c, why);
  }
  return forbidden ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult check_context_sync(context* ctx) {
  std::lock_guard lock(g_capture_mutex);
  bool capturing = false;
  for (capture* c : g_active_captures) {
    context const* origin = c->origin->ctx;
    if (origin != ctx && (origin->green == nullptr || origin->green->primary != ctx)) continue;
    capturing = true;
    invalidate(c, "cuCtxSynchronize during capture");
  }
  return capturing ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult refuse_context_capture(context* ctx, char const* why) {
  std::lock_guard lock(g_capture_mutex);
  bool capturing = false;
  for (capture* c : g_active_captures) {
    if (std::none_of(c->members.begin(), c->members.end(), [ctx](stream* m) { return m->ctx == ctx; })) continue;
    capturing = true;
    invalidate(c, why);
  }
  return capturing ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

void reset_context_streams(context* ctx) {
  std::vector<stream*> all = streams_of(ctx);
  all.push_back(ctx->legacy);
  for (stream* s : all) {
    if (graph* g = abandon_capture(s); g != nullptr) discard_graph(g);
  }
  {
    auto& r = streams_registry();
    std::lock_guard lock(r.mutex);
    for (stream* s : all) {
      if (s->kind == stream_kind::user && r.live.erase(s) != 0) r.dead.insert(s);
    }
  }
  for (stream* s : all) {
    std::unique_lock lock(s->mutex);
    while (s->running) s->idle.wait(lock);
    s->queue.clear();
    s->done = s->enqueued;
    if (s->kind != stream_kind::legacy) s->destroyed = true;
    s->idle.notify_all();
  }
  {
    auto& r = events_registry();
    std::lock_guard lock(r.mutex);
    for (auto it = r.live.begin(); it != r.live.end();) {
      auto* e = static_cast<event*>(const_cast<void*>(*it));
      if (e->ctx != ctx) {
        ++it;
        continue;
      }
      e->destroyed = true;
      r.dead.insert(e);
      it = r.live.erase(it);
    }
  }
  std::lock_guard lock(ctx->mutex);
  std::erase_if(ctx->streams, [](stream* s) { return s->kind != stream_kind::legacy; });
}

// ---- capture ---------------------------------------------------------------

std::mutex& capture_mutex() noexcept { return g_capture_mutex; }

CUresult begin_capture(stream* s, CUstreamCaptureMode mode) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  if (s->kind == stream_kind::legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  static std::atomic<std::uint64_t> next_id{1};
  std::lock_guard lock(g_capture_mutex);
  if (capture* c = capture_of(s); c != nullptr && c->active) return CUDA_ERROR_ILLEGAL_STATE;
  auto* c = all_captures().emplace_back(std::make_unique<capture>()).get();
  c->id = next_id.fetch_add(1);
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = s;
  c->g = new graph;
  c->g->device = s->ctx->device;
  c->members.push_back(s);
  g_active_captures.push_back(c);
  s->cap.store(c, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult end_capture(stream* s, graph** out) {
  std::lock_guard lock(g_capture_mutex);
  capture* c = capture_of(s);
  if (c == nullptr || !c->active) return CUDA_ERROR_ILLEGAL_STATE;
  if (c->origin != s) {
    invalidate(c, "cuStreamEndCapture on a stream that did not begin the capture");
    return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  }
  if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && c->thread != std::this_thread::get_id())
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  c->active = false;
  for (stream* m : c->members) m->cap.store(nullptr, std::memory_order_release);
  std::erase(g_active_captures, c);
  if (c->invalidated) {
    *out = c->g;  // caller destroys it: an invalidated capture yields no graph
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *out = c->g;
  return CUDA_SUCCESS;
}

CUresult join_capture(stream* s, capture* c) {
  std::lock_guard lock(g_capture_mutex);
  if (!c->active) return CUDA_SUCCESS;
  capture* mine = capture_of(s);
  if (mine == c) return CUDA_SUCCESS;
  if (mine != nullptr && mine->active) {
    invalidate(c, "wait on an event of another capture");
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  }
  c->members.push_back(s);
  s->cap.store(c, std::memory_order_release);
  return CUDA_SUCCESS;
}

capture_info capture_status(stream* s) {
  std::lock_guard lock(g_capture_mutex);
  capture_info info;
  capture* c = capture_of(s);
  if (c == nullptr || !c->active) return info;
  info.status = c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  info.id = c->id;
  info.g = c->g;
  info.c = c;
  return info;
}

graph* abandon_capture(stream* s) {
  std::lock_guard lock(g_capture_mutex);
  capture* c = capture_of(s);
  if (c == nullptr || !c->active || c->origin != s) return nullptr;
  invalidate(c, "capturing stream destroyed before cuStreamEndCapture");
  c->active = false;
  for (stream* m : c->members) m->cap.store(nullptr, std::memory_order_release);
  std::erase(g_active_captures, c);
  return c->g;
}

bool invalidate_if_active(capture* c, char const* why) {
  std::lock_guard lock(g_capture_mutex);
  if (c == nullptr || !c->active) return false;
  invalidate(c, why);
  return true;
}

}  // namespace gpumemsim
