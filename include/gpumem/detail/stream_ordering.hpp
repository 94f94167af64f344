#pragma once
// Stream identity and the driver calls that order one stream after another,
// shared by the stream-ordered caching resources (pool, fixed_size).

#include <gpumem/stream.hpp>

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpumem::detail {

/// Whom a per-stream free list belongs to.
struct stream_identity {
  /// Table key. A real stream: its handle; the null and legacy streams: 0x1; the
  /// per-thread default stream (0x2), which is a different stream on every
  /// thread: (thread tag << 3) | 0x2, which no handle (8-byte aligned) can equal.
  std::uintptr_t key{};
  CUstream handle{};             ///< what to pass to the driver
  std::uint64_t owner_thread{};  ///< per-thread default stream: its thread's tag; else 0

  /// Only the owning thread can name a per-thread default stream to the driver.
  [[nodiscard]] bool usable_from_this_thread() const noexcept;
  /// Where the calling thread records an event to order after this stream: the
  /// stream itself, or, for another thread's per-thread default stream, the
  /// legacy stream — which waits for all prior work of every blocking stream,
  /// per-thread default streams included (CUDA's legacy-stream semantics).
  [[nodiscard]] CUstream record_handle() const noexcept {
    return usable_from_this_thread() ? handle : reinterpret_cast<CUstream>(legacy_stream_handle);
  }
  /// The legacy and per-thread default streams are never destroyed.
  [[nodiscard]] bool is_default_stream() const noexcept { return key == legacy_stream_handle || owner_thread != 0; }
};

/// Nonzero, unique per thread for the life of the process.
[[nodiscard]] std::uint64_t this_thread_tag() noexcept;

/// Nonzero, unique per call for each Owner: names an instance of Owner in the
/// thread-local caches Owner keeps for all its instances (an address could be
/// reused by a later instance). Consecutive per Owner, so that instances made one
/// after another (a binning resource's bins) take different cache slots.
template <class Owner>
[[nodiscard]] std::uint64_t next_instance_id() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

/// Thread-local hints, one slot per instance id modulo this: a thread using up to 4
/// instances in turn (a binning resource's bins) keeps a hint for each. More slots
/// cost static TLS, of which the preloaded shim (initial-exec TLS) has little: at 16,
/// dlopen could no longer load it ("cannot allocate memory in static TLS block").
inline constexpr std::size_t thread_cache_slots = 4;

[[nodiscard]] stream_identity identify(stream_ref s) noexcept;

/// Whether a stream is capturing, as far as the driver can say.
enum class capture_state {
  /// Not capturing. Also the answer when the thread has no current context:
  /// nothing it names can capture then (and any record or wait fails by itself).
  none,
  /// Capturing, or its capture was invalidated and has not ended yet.
  capturing,
  /// The driver cannot tell: no driver, no cuStreamIsCapturing, or it failed (a
  /// destroyed or made-up handle; the legacy stream while another stream
  /// captures in global mode).
  unknown
};

/// gpumem's one question about stream capture (cuStreamIsCapturing). What
/// `unknown` means is each caller's decision, documented where it is made:
/// may_be_capturing() below for the resources; the shim's capture_guard.hpp for
/// what it passes to CUDA and for counting captures.
[[nodiscard]] capture_state stream_capture_state(CUstream s) noexcept;

/// For a resource about to record an event on `s` or make it wait: true unless
/// the driver says `s` is not capturing. A resource never touches a stream it
/// cannot vouch for (recording on a capturing stream would become part of its
/// graph); it grows instead.
[[nodiscard]] inline bool may_be_capturing(CUstream s) noexcept {
  return stream_capture_state(s) != capture_state::none;
}

/// Makes `to` wait for all work submitted to `from` so far: records `ev` on
/// `from` (creating it first, timing disabled, if null) and cuStreamWaitEvent(to, ev).
/// The host never blocks. Returns the first failing result.
[[nodiscard]] CUresult order_after(CUevent& ev, CUstream from, CUstream to) noexcept;

/// Records `ev` on `s`, creating it first if null.
[[nodiscard]] CUresult record_event(CUevent& ev, CUstream s) noexcept;

/// CUDA_SUCCESS once all work before the event's record completed,
/// CUDA_ERROR_NOT_READY before; other results as the driver gives them.
[[nodiscard]] CUresult query_event(CUevent ev) noexcept;

/// cuStreamWaitEvent(s, ev, 0).
[[nodiscard]] CUresult wait_event(CUstream s, CUevent ev) noexcept;

/// Destroys `ev` if non-null and resets it. Safe while streams still wait on it.
void destroy_event(CUevent& ev) noexcept;

}  // namespace gpumem::detail
