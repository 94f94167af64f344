#include "serve/serve.hpp"

#include "observe/event_log.hpp"
#include "observe/oom_snapshot.hpp"
#include "serve/capture_guard.hpp"
#include "serve/device_chains.hpp"
#include "serve/ipc_sharing.hpp"
#include "serve/live_streams.hpp"
#include "serve/managed_memory.hpp"
#include "serve/own_context_memory.hpp"
#include "serve/process_chains.hpp"
#include "shim_state.hpp"

#include <gpumem/call_context.hpp>
#include <gpumem/config.hpp>
#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/slow_work.hpp>
#include <gpumem/detail/stream_ordering.hpp>
#include <gpumem/stream_tracker.hpp>

#include <optional>

namespace gpumem::shim {
namespace {

thread_local runtime_call tl_runtime_call{};

stream_ref to_ref(CUstream s) noexcept { return stream_ref{s}; }

// One chain call, exceptions turned into the CUresult CUDA would give.
CUresult try_allocate(device_chain& c, std::size_t bytes, CUstream stream, void*& p) noexcept {
  try {
    p = c.chain->top().allocate(bytes, to_ref(stream));
    return p != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  } catch (bad_alloc const& e) { return e.code(); } catch (cuda_error const& e) {
    return e.code();
  } catch (logic_error const&) { return CUDA_ERROR_INVALID_VALUE; } catch (std::bad_alloc const&) {
    return CUDA_ERROR_OUT_OF_MEMORY;  // host memory for bookkeeping
  } catch (...) { return CUDA_ERROR_UNKNOWN; }
}

/// The out-of-memory path of chain_allocate: trims what the chain caches (other
/// streams' free blocks, empty slabs) and retries once.
GPUMEM_COLD CUresult trim_and_retry(device_chain& c, std::size_t bytes, CUstream stream, void*& p) noexcept {
  try {
    (void)c.chain->top().release();
  } catch (...) {}
  return try_allocate(c, bytes, stream, p);
}

}  // namespace

runtime_call& current_runtime_call() noexcept { return tl_runtime_call; }

scoped_runtime_call::scoped_runtime_call(const char* entry, CUresult forced) noexcept : saved_{tl_runtime_call} {
  tl_runtime_call = runtime_call{entry, forced};
}
scoped_runtime_call::~scoped_runtime_call() { tl_runtime_call = saved_; }

const char* attribute(const char* driver_entry) noexcept {
  return tl_runtime_call.entry != nullptr ? tl_runtime_call.entry : driver_entry;
}

CUresult take_forced_result() noexcept {
  CUresult const r = tl_runtime_call.forced;
  tl_runtime_call.forced = CUDA_SUCCESS;
  return r;
}

CUresult chain_allocate(void** out, std::size_t bytes, CUstream stream, alloc_kind kind, const char* entry,
                        entry_level entered, stream_home const& home) noexcept {
  // A synchronous allocation CUDA may refuse during a capture: CUDA's to answer
  // (capture_may_refuse_unsafe_calls).
  if (kind != alloc_kind::async && capture_may_refuse_unsafe_calls()) return CUDA_ERROR_NOT_SUPPORTED;
  CUcontext ctx = nullptr;
  int dev = current_device(ctx);
  // A stream of another device: CUDA allocates from the stream's device, whichever
  // is current. Served from that device's chain, its primary context current for
  // the call (a growth allocates in the current context).
  std::optional<detail::scoped_context> on_stream_device;
  if (home.device >= 0 && home.device != dev && (dev >= 0 || home.primary)) {
    if (!home.primary) return CUDA_ERROR_NOT_SUPPORTED;  // another device's own context: CUDA's to serve
    on_stream_device.emplace(home.ctx);
    if (!on_stream_device->ok()) return CUDA_ERROR_NOT_SUPPORTED;
    dev = home.device;
  }
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult err = CUDA_SUCCESS;
  device_chain* c = chain_for(dev, err);
  if (c == nullptr) {
    if (err != CUDA_ERROR_NOT_SUPPORTED) note_failed_allocation(bytes, stream, entry, err);
    return err;
  }
  auto const start = event_clock();
  void* p = nullptr;
  CUresult r = CUDA_SUCCESS;
  {
    scoped_relaxed_capture relaxed;  // a pool growth must not break another thread's capture
    // cudaMalloc's memory may be used at once on any stream (safe mode keeps that promise).
    bool const synchronous = safe_mode() && kind != alloc_kind::async;
    scoped_call_context call{entry, dev, synchronous};
    r = try_allocate(*c, bytes, stream, p);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) r = trim_and_retry(*c, bytes, stream, p);
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) explain_out_of_memory(*c, bytes, stream, entry);  // no chain lock held
  auto& st = state().stats;
  if (r != CUDA_SUCCESS) {
    st.failed_allocations.add();
    log_event(event_row(log_action::allocate_failure, nullptr, bytes, stream, dev, entry, r), start);
    return r;
  }
  try {
    registry().insert(reinterpret_cast<std::uintptr_t>(p), allocation{bytes, stream, c, dev, kind, entry});
  } catch (...) {
    // No host memory to remember it: give the block back rather than lose track.
    scoped_call_context call{entry, dev};
    c->chain->top().deallocate(p, bytes, to_ref(stream));
    st.failed_allocations.add();
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  st.chain_allocations.add();
  if (entered == entry_level::runtime) st.runtime_allocations.add();
  log_event(event_row(log_action::allocate, p, bytes, stream, dev, entry, CUDA_SUCCESS), start);
  *out = p;
  return CUDA_SUCCESS;
}

namespace {

free_outcome refuse_double_free(void* p, CUstream stream, const char* entry, event_start start) noexcept {
  state().stats.double_frees.add();
  message(level::error, "%s(%p): double free of a pointer gpumem handed out; refused (invalid value)", entry, p);
  log_event(event_row(log_action::free, p, 0, stream, -1, entry, CUDA_ERROR_INVALID_VALUE), start);
  return free_outcome::answered(CUDA_ERROR_INVALID_VALUE);
}

/// An event recorded, in the stream's own context, after the work submitted to
/// `stream` (a stream of another device than the chain's) so far; null if that
/// failed. Nothing of the chain's device orders such a stream: its barriers join
/// the streams of their own device only.
CUevent record_foreign_work(CUstream stream, stream_home const& home) noexcept {
  CUevent ev = nullptr;
  detail::scoped_context in_stream{home.ctx};
  if (!in_stream.ok() || detail::record_event(ev, stream) != CUDA_SUCCESS) detail::destroy_event(ev);
  return ev;
}

/// A stream-ordered free of chain `c`'s block on a stream of another device: the
/// chain's legacy stream waits for that stream's work so far (cuStreamWaitEvent
/// crosses devices), and the block is freed as cudaFree frees it (safe mode: behind
/// the next barrier of the chain's device, which follows the legacy stream). The
/// chain's own stream-ordered reuse could not name that stream's work. During a
/// capture the legacy stream may not be touched: the block is parked with the
/// event. False: nothing could order the block (it stays allocated).
bool free_after_foreign_stream(device_chain& c, void* p, std::size_t bytes, CUstream stream, stream_home const& home,
                               const char* entry) noexcept {
  CUevent ev = record_foreign_work(stream, home);
  if (ev == nullptr) {
    // The host waits instead, where that breaks no capture.
    if (stream_tracker::capture_active() || detail::driver().cuStreamSynchronize(stream) != CUDA_SUCCESS) return false;
  } else if (stream_tracker::capture_active()) {
    park_until_captures_end(p, bytes, &c, ev);
    return true;
  } else {
    scoped_chain_context in_chain{c};
    bool const waited = in_chain.ok() && detail::wait_event(CU_STREAM_LEGACY, ev) == CUDA_SUCCESS;
    detail::destroy_event(ev);  // safe while the wait is pending
    if (!waited && detail::driver().cuStreamSynchronize(stream) != CUDA_SUCCESS) return false;
  }
  free_as_cuda_free(c, p, bytes, entry);
  return true;
}

/// Whether a chain holds the memory at p (its pool slabs, free or in use).
bool inside_a_chain(void const* p) noexcept {
  // The managed chain's memory: what its pools hold and, unpooled, its blocks: an
  // interior pointer is refused here and logged, as CUDA refuses it.
  bool owned = process_chain_owns(process_memory::managed, p);
  if (!owned) {
    auto const hit = registry().find_containing(reinterpret_cast<std::uintptr_t>(p));
    owned = hit && hit->second.kind == alloc_kind::managed_chain;
  }
  try {
    for_each_chain([&](device_chain& c) { owned = owned || c.chain->top().owns(p); });
  } catch (...) {}
  return owned;
}

}  // namespace

free_outcome free_registered(void* p, CUstream stream, free_kind kind, const char* entry) noexcept {
  bool const stream_ordered = kind == free_kind::async;
  allocation a{};
  auto const start = event_clock();
  auto const key = reinterpret_cast<std::uintptr_t>(p);
  // One probe: the record is consumed at once (of two racing frees one is refused);
  // the rare free that fails after this puts it back.
  switch (registry().take(key, a)) {
    case take_result::unknown:
      // Not a pointer we handed out, or one freed so long ago that its record is gone:
      // inside a chain's memory it can only be a second free (CUDA would free the
      // whole slab if it got it); anything else is CUDA's to answer.
      if (inside_a_chain(p)) {
        message(level::error,
                "%s(%p): not the start of an allocation gpumem handed out (an interior pointer, or a free of an "
                "allocation freed long ago); refused (invalid value)",
                entry, p);
        log_event(event_row(log_action::free, p, 0, stream, -1, entry, CUDA_ERROR_INVALID_VALUE), start);
        return free_outcome::answered(CUDA_ERROR_INVALID_VALUE);
      }
      return {};
    case take_result::already_freed: return refuse_double_free(p, stream, entry, start);
    case take_result::taken: break;
  }
  // CUDA's own memory: taken before CUDA can hand the address to someone else; the
  // caller restores it if CUDA refuses the free.
  if (!served_by_gpumem(a.kind)) return free_outcome::cudas_memory(a);
  // cudaFree during a capture, from a thread CUDA forbids it (its own capture, or a
  // global one): CUDA's error, and the block stays allocated, as CUDA keeps it.
  if (!stream_ordered && capture_may_refuse_unsafe_calls()) {
    if (CUresult const refused = unsafe_call_verdict(); refused == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
      restore_registration(p, a);
      log_event(event_row(log_action::free, p, a.bytes, stream, a.device, entry, refused), start);
      return free_outcome::answered(refused);
    }
  }
  // The managed chain's block: no stream order to keep (its pool fences every free:
  // the host may touch the memory).
  if (a.kind == alloc_kind::managed_chain) return free_outcome::answered(managed_free(p, a, stream, entry, start));
  // Shared with another process that still has it open: the pool gets it back when
  // the last import closes (ipc_sharing.hpp).
  if (ipc_park_free(p, a)) {
    state().stats.chain_frees.add();
    log_event(event_row(log_action::free, p, a.bytes, stream, a.device, entry, CUDA_SUCCESS), start);
    return free_outcome::answered(CUDA_SUCCESS);
  }
  // A destroyed or made-up stream: CUDA's error, and nothing consumed (a later, valid
  // free must still find the pointer).
  stream_home home;
  if (stream_ordered) {
    if (CUresult const bad = check_stream(stream, &home); bad != CUDA_SUCCESS) {
      restore_registration(p, a);
      log_event(event_row(log_action::free, p, a.bytes, stream, a.device, entry, bad), start);
      return free_outcome::answered(bad);
    }
  }
  if (stream_ordered && (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)) {
    // A default stream is the current context's: of the current device.
    CUcontext ctx = nullptr;
    int const dev = current_device(ctx);
    home = stream_home{ctx, dev, dev >= 0};
  }
  device_chain& c = *a.chain;
  if (stream_ordered && home.device >= 0 && home.device != c.device && !stream_capturing(stream)) {
    scoped_relaxed_capture relaxed;
    if (!free_after_foreign_stream(c, p, a.bytes, stream, home, entry)) {
      message(level::warn,
              "%s(%p): cannot order the free after the work of a stream of device %d; the %zu bytes stay reserved",
              entry, p, home.device, a.bytes);
    }
  } else {
    // The chain's context, when another is current and the free may reach the driver
    // (a pool's free only files the block: no context lookup on the hot path). Without
    // it, the capture check of a free on stream 0 reads the caller's legacy stream,
    // the one such a free names.
    std::optional<scoped_chain_context> ctx;
    if (c.free_calls_driver) ctx.emplace(c);
    scoped_relaxed_capture relaxed;
    if (stream_ordered && stream_capturing(stream)) {
      // Freeing on a capturing stream: no event may be recorded there. The block
      // waits until every capture ended.
      park_until_captures_end(p, a.bytes, &c);
    } else {
      // Stream order is kept only when both the allocation and the free were
      // stream-ordered; any other mix keeps cudaFree's promise (safe mode): the
      // block waits for a device-wide barrier. cudaFree has no stream: legacy.
      bool const synchronous = safe_mode() && (!stream_ordered || a.kind != alloc_kind::async);
      CUstream const s = stream_ordered ? stream : nullptr;
      scoped_call_context call{entry, c.device, synchronous};
      c.chain->top().deallocate(p, a.bytes, to_ref(s));
    }
  }
  state().stats.chain_frees.add();
  log_event(event_row(log_action::free, p, a.bytes, stream, c.device, entry, CUDA_SUCCESS), start);
  return free_outcome::answered(CUDA_SUCCESS);
}

void settle_passthrough_free(void* p, free_outcome const& o, bool freed) noexcept {
  if (!o.passthrough_allocation) return;
  if (freed) {
    own_context_freed(o.taken);
  } else {
    restore_registration(p, o.taken);
  }
}

void restore_registration(void* p, allocation const& a) noexcept {
  // Never over a new live owner of the address; without host memory, a later free of
  // p goes to CUDA as an unknown pointer, which is CUDA's own answer for its memory.
  static_cast<void>(registry().restore(reinterpret_cast<std::uintptr_t>(p), a));
}

bool note_passthrough_allocation(void* p, std::size_t bytes, CUstream stream, alloc_kind kind, const char* entry,
                                 CUresult result, event_start start, device_chain* charged) noexcept {
  detail::note_slow_work();  // CUDA's own call: its row is timed
  CUcontext ctx = nullptr;
  int const dev = current_device(ctx);
  auto& st = state().stats;
  if (result != CUDA_SUCCESS) {
    st.failed_allocations.add();
    log_event(event_row(log_action::allocate_failure, nullptr, bytes, stream, dev, entry, result), start);
    return false;
  }
  if (p == nullptr) return false;  // a successful zero-byte request
  bool registered = false;
  try {
    // Seen at both levels (a runtime hook and the driver hook the runtime called):
    // counted once.
    if (!registry().insert_if_absent(reinterpret_cast<std::uintptr_t>(p),
                                     allocation{bytes, stream, charged, dev, kind, entry})) {
      return false;
    }
    registered = true;
  } catch (...) {
    // Unregistered, its free goes to CUDA as an unknown pointer: still correct.
  }
  st.passthrough_allocations.add();
  if (kind == alloc_kind::captured) st.captured_passthroughs.add();
  log_event(event_row(log_action::allocate, p, bytes, stream, dev, entry, CUDA_SUCCESS), start);
  return registered;
}

void note_passthrough_free(void* p, CUstream stream, const char* entry, CUresult result, event_start start) noexcept {
  detail::note_slow_work();  // CUDA's own call: its row is timed
  state().stats.passthrough_frees.add();
  CUcontext ctx = nullptr;
  log_event(event_row(log_action::free, p, 0, stream, current_device(ctx), entry, result), start);
}

void note_failed_allocation(std::size_t bytes, CUstream stream, const char* entry, CUresult result) noexcept {
  state().stats.failed_allocations.add();
  CUcontext ctx = nullptr;
  log_event(event_row(log_action::allocate_failure, nullptr, bytes, stream, current_device(ctx), entry, result),
            event_clock());
}

bool is_default_pool(CUmemoryPool pool) noexcept {
  CUcontext ctx = nullptr;
  int const dev = current_device(ctx);
  auto const& d = detail::driver();
  if (dev < 0 || d.cuDeviceGetDefaultMemPool == nullptr) return false;
  if (device_chain* c = built_chain(dev); c != nullptr && c->default_pool != nullptr) return pool == c->default_pool;
  CUmemoryPool def = nullptr;
  return d.cuDeviceGetDefaultMemPool(&def, static_cast<CUdevice>(dev)) == CUDA_SUCCESS && def == pool;
}

}  // namespace gpumem::shim
