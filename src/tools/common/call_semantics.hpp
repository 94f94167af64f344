#pragma once
// What a log row says about its call's CUDA semantics, as a replay needs it: which
// stream the call was ordered on, and whether it belongs to the synchronous
// cudaMalloc/cudaFree family. gpumem-replay and the benchmarks' replay read rows
// through these, so both replay a log the same way.
//
// Thread safety: pure functions.

#include "log_event.hpp"

#include <compare>
#include <cstdint>
#include <string_view>

namespace gpumem::tools {

/// The Stream column's handles of CUDA's default streams: 0 is the null stream,
/// 0x1 cudaStreamLegacy (both the legacy default stream), 0x2 cudaStreamPerThread.
inline constexpr std::uint64_t null_stream_log_handle = 0x0;
inline constexpr std::uint64_t legacy_stream_log_handle = 0x1;
inline constexpr std::uint64_t per_thread_stream_log_handle = 0x2;

/// A stream of the logged program as a replay tells them apart: by handle, except
/// the per-thread default stream, which is a different stream on every thread.
struct replay_stream {
  std::uint64_t handle{};
  std::uint64_t thread{};  ///< the logging thread for the per-thread stream, else 0
  /// The legacy default stream (null or cudaStreamLegacy): replayed on the legacy
  /// stream, never created.
  [[nodiscard]] constexpr bool legacy() const noexcept {
    return handle == null_stream_log_handle || handle == legacy_stream_log_handle;
  }
  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 misreads the defaulted <=> (its literal 0)
  friend constexpr auto operator<=>(replay_stream const&, replay_stream const&) = default;
};

[[nodiscard]] constexpr replay_stream replay_stream_of(log_event const& ev) noexcept {
  return {ev.stream, ev.stream == per_thread_stream_log_handle ? ev.thread_id : 0};
}

/// The cudaMalloc/cudaFree family (runtime and driver, pitch included): memory usable
/// on any stream at once, freed by a free that waits for the device. Everything else
/// (cudaMallocAsync, RMM's resources...) is stream-ordered.
[[nodiscard]] constexpr bool synchronous_entry(std::string_view entry) noexcept {
  return entry == "cudaMalloc" || entry == "cudaMallocPitch" || entry == "cudaFree" || entry == "cuMemAlloc" ||
         entry.starts_with("cuMemAlloc_") || entry.starts_with("cuMemAllocPitch") || entry == "cuMemFree" ||
         entry.starts_with("cuMemFree_");
}

/// Pinned host memory (cudaHostAlloc, cudaMallocHost, their driver twins, their frees,
/// and registration): the tools keep it apart from device memory. Its pointers are
/// host addresses, it counts toward no device's peak, and a replay of device chains
/// has nothing to do with it.
[[nodiscard]] constexpr bool pinned_host_entry(std::string_view entry) noexcept {
  return entry == "cudaHostAlloc" || entry == "cudaMallocHost" || entry == "cudaFreeHost" ||
         entry == "cudaHostRegister" || entry == "cudaHostUnregister" || entry.starts_with("cuMemHostAlloc") ||
         entry.starts_with("cuMemAllocHost") || entry == "cuMemFreeHost" || entry.starts_with("cuMemHostRegister") ||
         entry == "cuMemHostUnregister";
}

/// Managed memory's allocations. Its frees are cudaFree / cuMemFree, as device
/// memory's: only the pointer tells them apart (log_reader does).
[[nodiscard]] constexpr bool managed_entry(std::string_view entry) noexcept {
  return entry == "cudaMallocManaged" || entry.starts_with("cuMemAllocManaged");
}

/// The memory a row is about, as far as its Entry tells.
[[nodiscard]] constexpr memory_kind memory_kind_of_entry(std::string_view entry) noexcept {
  if (pinned_host_entry(entry)) return memory_kind::pinned_host;
  if (managed_entry(entry)) return memory_kind::managed;
  return memory_kind::device;
}

}  // namespace gpumem::tools
