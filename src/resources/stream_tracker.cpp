#include <gpumem/stream_tracker.hpp>

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/stream_ordering.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <new>
#include <optional>
#include <vector>

namespace gpumem {

namespace {

// One mutex for every tracker: barriers, registrations and capture begins are rare,
// and a capture begin must exclude every device's barrier.
std::mutex& tracker_mutex() noexcept {
  // NOLINTNEXTLINE(bugprone-unhandled-exception-at-new): running out of memory here ends the process
  static auto* m = new std::mutex{};
  return *m;
}

}  // namespace

struct stream_tracker::state {
  /// Retired events swept for finished ones when there are this many (and then
  /// when twice as many as a sweep kept).
  static constexpr std::size_t first_sweep = 64;

  struct tracked {
    CUstream stream{};
    bool non_blocking{};
    CUevent event{};  ///< recorded on `stream` by each barrier; created on first need
  };
  struct green {
    CUgreenCtx ctx{};
    CUevent event{};  ///< recorded for `ctx` by each barrier; created on first need
  };
  CUcontext primary{};
  bool primary_known = false;
  CUevent legacy_event{};  ///< E_L of the last barrier
  bool broken = false;     ///< a stream or green context went untracked: barriers would be unsound
  std::vector<tracked> streams;
  std::vector<green> greens;           ///< green contexts made from the primary context
  std::vector<CUevent> retired;        ///< last events of streams and green contexts destroyed since the last barrier
  std::size_t sweep_at = first_sweep;  ///< retired.size() that makes retire() sweep
  std::atomic<std::uint64_t> barriers{0};
  std::atomic<std::size_t> stream_count{0};
  std::atomic<std::size_t> non_blocking_count{0};
  std::atomic<std::size_t> green_count{0};
  std::atomic<std::size_t> barrier_calls{1};  ///< 2k + 3g + 1, read by the pools without the lock

  /// After `streams` changed (caller holds the process-wide mutex).
  void recount() noexcept {
    stream_count.store(streams.size(), std::memory_order_relaxed);
    auto const n = std::count_if(streams.begin(), streams.end(), [](tracked const& t) { return t.non_blocking; });
    non_blocking_count.store(static_cast<std::size_t>(n), std::memory_order_relaxed);
    green_count.store(greens.size(), std::memory_order_relaxed);
    barrier_calls.store(2 * static_cast<std::size_t>(n) + 3 * greens.size() + 1, std::memory_order_relaxed);
  }

  /// Whether `stream` belongs to a green context registered here (the driver says
  /// which, if any; caller holds the process-wide mutex).
  [[nodiscard]] bool green_stream(CUstream stream) const noexcept {
    auto const& d = detail::driver();
    CUgreenCtx owner = nullptr;
    return !greens.empty() && d.cuStreamGetGreenCtx != nullptr &&
           d.cuStreamGetGreenCtx(stream, &owner) == CUDA_SUCCESS && owner != nullptr &&
           std::any_of(greens.begin(), greens.end(), [&](state::green const& g) { return g.ctx == owner; });
  }

  /// `stream` is about to be destroyed: work queued on it still runs, so its end is
  /// remembered for the next barrier. A capturing stream has no work of its own in
  /// flight to remember, and one the driver cannot vouch for is never recorded on
  /// (it could be capturing). Caller holds the process-wide mutex.
  void remember_last_work(CUstream stream) noexcept {
    // The event must belong to the stream's context: the caller may have another
    // device current (a program destroying device 1's stream from device 0).
    std::optional<detail::scoped_context> ctx;
    if (primary_known) ctx.emplace(primary);
    CUevent last = nullptr;
    if (!detail::may_be_capturing(stream) && detail::record_event(last, stream) != CUDA_SUCCESS) {
      detail::destroy_event(last);
      broken = true;
    }
    retire(last);
  }

  /// Keeps `last`, the end of a destroyed stream's or green context's work, for the
  /// next barrier (caller holds the process-wide mutex).
  void retire(CUevent last) noexcept {
    if (last == nullptr) return;
    try {
      retired.push_back(last);
    } catch (...) {
      detail::destroy_event(last);
      broken = true;
      return;
    }
    if (retired.size() >= sweep_at) sweep_retired();
  }

  /// A program that creates and destroys streams in a loop and frees nothing makes
  /// no barrier: one event per destroyed stream would pile up for its whole life.
  /// An event that has completed orders nothing any more (its work has run, as for
  /// an idle stream in barrier()), so it goes. Amortised: a sweep comes only once
  /// the list doubled. Never during a capture: no query may touch it. Caller holds
  /// the process-wide mutex.
  void sweep_retired() noexcept {
    if (active_captures.load(std::memory_order_acquire) == 0) {
      std::erase_if(retired, [](CUevent& ev) {
        if (detail::query_event(ev) != CUDA_SUCCESS) return false;  // still to run, or unknown: kept
        detail::destroy_event(ev);
        return true;
      });
    }
    sweep_at = std::max(first_sweep, 2 * retired.size());
  }
};

stream_tracker& stream_tracker::of(int device) noexcept {
  // Built once, never destroyed (no destructor runs at exit). The last slot serves
  // out-of-range devices: its state is broken, so it refuses every barrier.
  static auto* const all = [] {
    auto* a = static_cast<stream_tracker*>(::operator new(sizeof(stream_tracker) * (max_devices + 1)));
    for (int i = 0; i <= max_devices; ++i) new (a + i) stream_tracker{i < max_devices ? i : -1};
    return a;
  }();
  if (device < 0 || device >= max_devices) return all[max_devices];
  return all[device];
}

stream_tracker::state* stream_tracker::ensure_state() noexcept {
  state* s = state_.load(std::memory_order_acquire);
  if (s == nullptr) {
    s = new (std::nothrow) state{};
    state_.store(s, std::memory_order_release);
  }
  if (s != nullptr && !s->primary_known) {
    auto const& d = detail::driver();
    CUdevice dev{};
    // Retained once for the life of the process: the handle stays valid across resets.
    if (d.init_result == CUDA_SUCCESS && d.cuDeviceGet(&dev, device_) == CUDA_SUCCESS &&
        d.cuDevicePrimaryCtxRetain(&s->primary, dev) == CUDA_SUCCESS) {
      s->primary_known = true;
    }
  }
  return s;
}

bool stream_tracker::is_primary(CUcontext ctx) noexcept {
  if (ctx == nullptr || device_ < 0) return false;
  std::lock_guard lock{tracker_mutex()};
  state* s = ensure_state();
  return s != nullptr && s->primary_known && ctx == s->primary;
}

bool stream_tracker::covers(CUstream stream) noexcept {
  auto const h = reinterpret_cast<std::uintptr_t>(stream);
  if (h == 0 || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return true;
  CUcontext primary = nullptr;
  {
    std::lock_guard lock{tracker_mutex()};
    state const* s = ensure_state();  // (retains the primary context, to compare with)
    // Registered, or a stream of a registered green context (ordered with its context).
    if (s != nullptr && (std::any_of(s->streams.begin(), s->streams.end(),
                                     [&](state::tracked const& t) { return t.stream == stream; }) ||
                         s->green_stream(stream))) {
      return true;
    }
    if (s != nullptr && s->primary_known) primary = s->primary;
  }
  // A blocking stream is ordered through the legacy stream only in the legacy
  // stream's own context: not one of another device, or of a context made by
  // cuCtxCreate.
  auto const& d = detail::driver();
  unsigned flags = 0;
  CUcontext ctx = nullptr;
  return primary != nullptr && d.cuStreamGetFlags != nullptr && d.cuStreamGetFlags(stream, &flags) == CUDA_SUCCESS &&
         (flags & CU_STREAM_NON_BLOCKING) == 0 && d.cuStreamGetCtx != nullptr &&
         d.cuStreamGetCtx(stream, &ctx) == CUDA_SUCCESS && ctx == primary;
}

void stream_tracker::stream_created(CUstream stream, unsigned flags) noexcept {
  if (stream == nullptr || device_ < 0) return;
  std::lock_guard lock{tracker_mutex()};
  state* s = ensure_state();
  if (s == nullptr) return;  // no state, so no barrier can ever be made: safe
  bool const non_blocking = (flags & CU_STREAM_NON_BLOCKING) != 0;
  try {
    s->streams.push_back({stream, non_blocking, nullptr});
  } catch (...) {
    s->broken = true;  // an unknown non-blocking stream would make barriers unsound
    return;
  }
  s->recount();
  // Blocks reused after the last barrier may still be touched by work older than
  // it; a new non-blocking stream must not overtake that work either.
  if (non_blocking && s->legacy_event != nullptr) {
    if (detail::wait_event(stream, s->legacy_event) != CUDA_SUCCESS) s->broken = true;
  }
}

void stream_tracker::stream_destroying(CUstream stream) noexcept {
  if (stream == nullptr || device_ < 0 || state_.load(std::memory_order_acquire) == nullptr) return;
  std::lock_guard lock{tracker_mutex()};
  state* const s = state_.load(std::memory_order_acquire);
  if (s == nullptr) return;
  auto& v = s->streams;
  auto const it = std::find_if(v.begin(), v.end(), [&](state::tracked const& t) { return t.stream == stream; });
  if (it == v.end()) {
    // A green context's stream: whether the context's record still sees work of
    // its destroyed streams is not documented, so the stream's own is remembered.
    if (s->green_stream(stream)) s->remember_last_work(stream);
    return;
  }
  s->remember_last_work(stream);
  // Destroying an event other streams still wait on is allowed: the waits keep it.
  detail::destroy_event(it->event);
  v.erase(it);
  s->recount();
}

void stream_tracker::green_context_created(CUgreenCtx green) noexcept {
  if (green == nullptr || device_ < 0) return;
  std::lock_guard lock{tracker_mutex()};
  state* s = ensure_state();
  if (s == nullptr) return;  // no state, so no barrier can ever be made: safe
  try {
    s->greens.push_back({green, nullptr});
  } catch (...) {
    s->broken = true;  // an unknown green context would make barriers unsound
    return;
  }
  s->recount();
  // As for a new non-blocking stream: its work must not overtake work older than
  // the last barrier on memory reused behind it.
  if (s->legacy_event != nullptr) {
    auto const& d = detail::driver();
    if (d.cuGreenCtxWaitEvent == nullptr || d.cuGreenCtxWaitEvent(green, s->legacy_event) != CUDA_SUCCESS) {
      s->broken = true;
    }
  }
}

bool stream_tracker::green_context_destroying(CUgreenCtx green) noexcept {
  if (green == nullptr || device_ < 0 || state_.load(std::memory_order_acquire) == nullptr) return false;
  std::lock_guard lock{tracker_mutex()};
  state* const s = state_.load(std::memory_order_acquire);
  if (s == nullptr) return false;
  auto& v = s->greens;
  auto const it = std::find_if(v.begin(), v.end(), [&](state::green const& g) { return g.ctx == green; });
  if (it == v.end()) return false;
  // Its work still runs after the destroy: remember its end for the next barrier.
  // While a capture is active the record could invalidate it (if a stream of this
  // context captures): not made, and no later barrier may then trust what it
  // knows of this context's work.
  auto const& d = detail::driver();
  std::optional<detail::scoped_context> ctx;
  if (s->primary_known) ctx.emplace(s->primary);  // the event's context
  CUevent last = nullptr;
  if (active_captures.load(std::memory_order_acquire) > 0 || d.cuGreenCtxRecordEvent == nullptr ||
      d.cuEventCreate(&last, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
      d.cuGreenCtxRecordEvent(green, last) != CUDA_SUCCESS) {
    detail::destroy_event(last);
    s->broken = true;
  }
  s->retire(last);
  detail::destroy_event(it->event);
  v.erase(it);
  s->recount();
  return true;
}

void stream_tracker::context_reset() noexcept {
  if (device_ < 0) return;
  std::lock_guard lock{tracker_mutex()};
  state* const s = state_.load(std::memory_order_acquire);
  if (s == nullptr) return;
  // The context's streams and events died with it, and the green contexts made
  // from it; only the primary handle stays.
  s->streams.clear();
  s->greens.clear();
  s->retired.clear();
  s->sweep_at = state::first_sweep;
  s->legacy_event = nullptr;
  s->broken = false;
  s->recount();
}

bool stream_tracker::barrier(std::span<CUevent const> also_after) noexcept {
  auto const& d = detail::driver();
  if (d.init_result != CUDA_SUCCESS || device_ < 0) return false;
  std::lock_guard lock{tracker_mutex()};
  if (active_captures.load(std::memory_order_acquire) > 0) return false;
  state* const st = ensure_state();
  if (st == nullptr || st->broken || !st->primary_known) return false;
  detail::scoped_context ctx{st->primary};
  if (!ctx.ok()) return false;
  CUstream const legacy = CU_STREAM_LEGACY;

  // 1. The legacy stream waits for every non-blocking stream that still has work
  //    queued, destroyed streams' last work and the caller's events. A stream whose
  //    work has all run needs no event (a query costs about half a record and a
  //    wait): nothing it was given before the frees can still touch their blocks,
  //    and what it is given later is a use after free, or ordered by step 3.
  for (auto& t : st->streams) {
    if (!t.non_blocking || d.cuStreamQuery(t.stream) == CUDA_SUCCESS) continue;
    if (detail::order_after(t.event, t.stream, legacy) != CUDA_SUCCESS) return false;
  }
  // A green context as a whole: every stream of it, its default stream included.
  for (auto& g : st->greens) {
    if (d.cuGreenCtxRecordEvent == nullptr) return false;
    if (g.event == nullptr && d.cuEventCreate(&g.event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      g.event = nullptr;
      return false;
    }
    if (d.cuGreenCtxRecordEvent(g.ctx, g.event) != CUDA_SUCCESS) return false;
    if (detail::wait_event(legacy, g.event) != CUDA_SUCCESS) return false;
  }
  for (CUevent ev : st->retired) {
    if (detail::wait_event(legacy, ev) != CUDA_SUCCESS) return false;
  }
  for (CUevent ev : also_after) {
    if (ev != nullptr && detail::wait_event(legacy, ev) != CUDA_SUCCESS) return false;
  }
  // 2. E_L follows everything submitted so far.
  if (detail::record_event(st->legacy_event, legacy) != CUDA_SUCCESS) return false;
  // 3. Every non-blocking stream's later work follows E_L (blocking streams follow
  //    the legacy stream by themselves).
  for (auto& t : st->streams) {
    if (t.non_blocking && detail::wait_event(t.stream, st->legacy_event) != CUDA_SUCCESS) return false;
  }
  for (auto& g : st->greens) {
    if (d.cuGreenCtxWaitEvent == nullptr || d.cuGreenCtxWaitEvent(g.ctx, st->legacy_event) != CUDA_SUCCESS) {
      return false;
    }
  }
  for (CUevent& ev : st->retired) detail::destroy_event(ev);
  st->retired.clear();
  st->sweep_at = state::first_sweep;
  st->barriers.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool stream_tracker::last_barrier_complete(bool wait) noexcept {
  auto const& d = detail::driver();
  if (d.init_result != CUDA_SUCCESS || device_ < 0) return false;
  std::lock_guard lock{tracker_mutex()};
  if (active_captures.load(std::memory_order_acquire) > 0) return false;
  state* const st = state_.load(std::memory_order_acquire);
  if (st == nullptr || st->legacy_event == nullptr) return true;  // no barrier yet
  detail::scoped_context ctx{st->primary};
  if (!ctx.ok()) return false;
  return (wait ? d.cuEventSynchronize(st->legacy_event) : d.cuEventQuery(st->legacy_event)) == CUDA_SUCCESS;
}

std::uint64_t stream_tracker::barrier_count() const noexcept {
  auto const* s = state_.load(std::memory_order_acquire);
  return s == nullptr ? 0 : s->barriers.load(std::memory_order_relaxed);
}

std::size_t stream_tracker::non_blocking_stream_count() const noexcept {
  auto const* s = state_.load(std::memory_order_acquire);
  return s == nullptr ? 0 : s->non_blocking_count.load(std::memory_order_relaxed);
}

std::size_t stream_tracker::barrier_calls() const noexcept {
  auto const* s = state_.load(std::memory_order_acquire);
  return s == nullptr ? 1 : s->barrier_calls.load(std::memory_order_relaxed);
}

std::size_t stream_tracker::green_context_count() const noexcept {
  auto const* s = state_.load(std::memory_order_acquire);
  return s == nullptr ? 0 : s->green_count.load(std::memory_order_relaxed);
}

std::size_t stream_tracker::stream_count() const noexcept {
  auto const* s = state_.load(std::memory_order_acquire);
  return s == nullptr ? 0 : s->stream_count.load(std::memory_order_relaxed);
}

void stream_tracker::lock_captures() noexcept { tracker_mutex().lock(); }

void stream_tracker::unlock_captures(bool began) noexcept {
  if (began) active_captures.fetch_add(1, std::memory_order_acq_rel);
  tracker_mutex().unlock();
}

void stream_tracker::capture_ended() noexcept {
  auto& n = active_captures;
  long cur = n.load(std::memory_order_acquire);
  // Never below zero: an EndCapture of a capture begun before gpumem counted.
  while (cur > 0 && !n.compare_exchange_weak(cur, cur - 1, std::memory_order_acq_rel)) {}
}

void stream_tracker::reset_after_fork() noexcept {
  new (&tracker_mutex()) std::mutex{};  // a parent thread may have held it at fork()
  active_captures.store(0, std::memory_order_relaxed);
  for (int i = 0; i < max_devices; ++i) {
    auto& t = of(i);
    // The parent's state (its events and streams) means nothing here: leak it.
    t.state_.store(nullptr, std::memory_order_relaxed);
  }
}

}  // namespace gpumem
