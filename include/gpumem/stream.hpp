#pragma once
// Streams are libcu++'s cuda::stream_ref (a cudaStream_t == CUstream handle).
//
// Special handles, as CUDA defines them: 0 is the legacy default stream for the
// plain driver entry points (the per-thread one for *_ptsz entry points, which
// the shim rewrites to 0x2 before a resource sees it), 0x1 is the legacy stream,
// 0x2 the per-thread default stream. Resources treat 0 and 0x1 as one stream.

#include <cuda/stream_ref>

#include <cstdint>

namespace gpumem {

using stream_ref = cuda::stream_ref;

inline constexpr std::uintptr_t legacy_stream_handle = 0x1;
inline constexpr std::uintptr_t per_thread_stream_handle = 0x2;

/// The stream's handle as an integer (0 for the null stream).
[[nodiscard]] inline std::uintptr_t stream_handle(stream_ref s) noexcept {
  return reinterpret_cast<std::uintptr_t>(s.get());
}

/// A key under which work on the same CUDA stream compares equal: maps the null
/// stream to the legacy stream, which is what it means to the driver.
[[nodiscard]] inline std::uintptr_t stream_key(stream_ref s) noexcept {
  auto const h = stream_handle(s);
  return h == 0 ? legacy_stream_handle : h;
}

[[nodiscard]] inline CUstream_st* to_cu(stream_ref s) noexcept { return s.get(); }

}  // namespace gpumem
