// cuMemset* and cuMemcpy*: plain host memset/memcpy run as stream operations.
// The synchronous forms queue on the legacy stream and wait for it, so they
// order after earlier work as on a GPU.

#include "memory.hpp"
#include "stream.hpp"

#include <cstring>
#include <functional>

using namespace gpumemsim;

namespace {

CUresult run_async(CUstream h, bool ptsz, char const* entry, std::function<void()> work) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  return enqueue(s, std::move(work));
}

CUresult run_sync(char const* entry, std::function<void()> work) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(CU_STREAM_LEGACY, false, entry, &s); r != CUDA_SUCCESS) return r;
  std::uint64_t seq = 0;
  bool captured = false;
  if (CUresult r = enqueue(s, std::move(work), &captured, &seq); r != CUDA_SUCCESS) return r;
  run_until(s, seq + 1);
  return CUDA_SUCCESS;
}

CUresult check_memset(CUdeviceptr dst, std::size_t count, std::size_t element) {
  if (CUresult r = init_status(); r != CUDA_SUCCESS) return r;
  if (count == 0) return CUDA_SUCCESS;
  if (dst % element != 0 || count > SIZE_MAX / element) return CUDA_ERROR_INVALID_VALUE;
  return check_device_range(static_cast<std::uintptr_t>(dst), count * element, access_kind::write);
}

std::function<void()> fill8(CUdeviceptr dst, unsigned char value, std::size_t n) {
  return [=] { std::memset(reinterpret_cast<void*>(dst), value, n); };
}

std::function<void()> fill32(CUdeviceptr dst, unsigned value, std::size_t n) {
  return [=] {
    auto* p = reinterpret_cast<unsigned char*>(dst);
    for (std::size_t i = 0; i < n; ++i) std::memcpy(p + i * sizeof value, &value, sizeof value);
  };
}

std::function<void()> copy(void* dst, void const* src, std::size_t n) {
  return [=] { std::memmove(dst, src, n); };
}

// Pointers inside a device heap or a VMM reservation must lie in device memory
// the copy may touch; others are host memory.
CUresult check_any(std::uintptr_t p, std::size_t n, access_kind how) {
  return is_device_address(p) ? check_device_range(p, n, how) : CUDA_SUCCESS;
}

}  // namespace

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char uc, size_t n) {
  SIM_ENTRY("cuMemsetD8_v2");
  if (CUresult r = check_memset(dst, n, 1); r != CUDA_SUCCESS || n == 0) return r;
  return run_sync("cuMemsetD8_v2", fill8(dst, uc, n));
}

CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int ui, size_t n) {
  SIM_ENTRY("cuMemsetD32_v2");
  if (CUresult r = check_memset(dst, n, 4); r != CUDA_SUCCESS || n == 0) return r;
  return run_sync("cuMemsetD32_v2", fill32(dst, ui, n));
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream h) {
  SIM_ENTRY("cuMemsetD8Async");
  if (CUresult r = check_memset(dst, n, 1); r != CUDA_SUCCESS) return r;
  return run_async(h, false, "cuMemsetD8Async", fill8(dst, uc, n));
}

SIM_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char uc, size_t n, CUstream h) {
  SIM_ENTRY("cuMemsetD8Async_ptsz");
  if (CUresult r = check_memset(dst, n, 1); r != CUDA_SUCCESS) return r;
  return run_async(h, true, "cuMemsetD8Async_ptsz", fill8(dst, uc, n));
}

CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int ui, size_t n, CUstream h) {
  SIM_ENTRY("cuMemsetD32Async");
  if (CUresult r = check_memset(dst, n, 4); r != CUDA_SUCCESS) return r;
  return run_async(h, false, "cuMemsetD32Async", fill32(dst, ui, n));
}

SIM_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int ui, size_t n, CUstream h) {
  SIM_ENTRY("cuMemsetD32Async_ptsz");
  if (CUresult r = check_memset(dst, n, 4); r != CUDA_SUCCESS) return r;
  return run_async(h, true, "cuMemsetD32Async_ptsz", fill32(dst, ui, n));
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  SIM_ENTRY("cuMemcpy");
  SIM_REQUIRE_INIT();
  if (n == 0) return CUDA_SUCCESS;
  if (check_any(dst, n, access_kind::write) != CUDA_SUCCESS || check_any(src, n, access_kind::read) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  return run_sync("cuMemcpy", copy(reinterpret_cast<void*>(dst), reinterpret_cast<void const*>(src), n));
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  SIM_ENTRY("cuMemcpyAsync");
  SIM_REQUIRE_INIT();
  if (check_any(dst, n, access_kind::write) != CUDA_SUCCESS || check_any(src, n, access_kind::read) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  return run_async(h, false, "cuMemcpyAsync",
                   copy(reinterpret_cast<void*>(dst), reinterpret_cast<void const*>(src), n));
}

SIM_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  SIM_ENTRY("cuMemcpyAsync_ptsz");
  SIM_REQUIRE_INIT();
  if (check_any(dst, n, access_kind::write) != CUDA_SUCCESS || check_any(src, n, access_kind::read) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  return run_async(h, true, "cuMemcpyAsync_ptsz",
                   copy(reinterpret_cast<void*>(dst), reinterpret_cast<void const*>(src), n));
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  SIM_ENTRY("cuMemcpyHtoD_v2");
  SIM_REQUIRE_INIT();
  if (n == 0) return CUDA_SUCCESS;
  if (src == nullptr || check_device_range(dst, n, access_kind::write) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  return run_sync("cuMemcpyHtoD_v2", copy(reinterpret_cast<void*>(dst), src, n));
}

CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  SIM_ENTRY("cuMemcpyDtoH_v2");
  SIM_REQUIRE_INIT();
  if (n == 0) return CUDA_SUCCESS;
  if (dst == nullptr || check_device_range(src, n, access_kind::read) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  return run_sync("cuMemcpyDtoH_v2", copy(dst, reinterpret_cast<void const*>(src), n));
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  SIM_ENTRY("cuMemcpyDtoD_v2");
  SIM_REQUIRE_INIT();
  if (n == 0) return CUDA_SUCCESS;
  if (check_device_range(dst, n, access_kind::write) != CUDA_SUCCESS ||
      check_device_range(src, n, access_kind::read) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  return run_sync("cuMemcpyDtoD_v2", copy(reinterpret_cast<void*>(dst), reinterpret_cast<void const*>(src), n));
}

#define SIM_ASYNC_COPY(name, ptsz, dst_t, src_t, check)                                                          \
  SIM_EXPORT CUresult name(dst_t dst, src_t src, size_t n, CUstream h) {                                         \
    SIM_ENTRY(#name);                                                                                            \
    SIM_REQUIRE_INIT();                                                                                          \
    if (check) return CUDA_ERROR_INVALID_VALUE;                                                                  \
    return run_async(h, ptsz, #name, copy(reinterpret_cast<void*>(dst), reinterpret_cast<void const*>(src), n)); \
  }

SIM_ASYNC_COPY(cuMemcpyHtoDAsync_v2, false, CUdeviceptr, const void*,
               src == nullptr || check_device_range(dst, n, access_kind::write) != CUDA_SUCCESS)
SIM_ASYNC_COPY(cuMemcpyHtoDAsync_v2_ptsz, true, CUdeviceptr, const void*,
               src == nullptr || check_device_range(dst, n, access_kind::write) != CUDA_SUCCESS)
SIM_ASYNC_COPY(cuMemcpyDtoHAsync_v2, false, void*, CUdeviceptr,
               dst == nullptr || check_device_range(src, n, access_kind::read) != CUDA_SUCCESS)
SIM_ASYNC_COPY(cuMemcpyDtoHAsync_v2_ptsz, true, void*, CUdeviceptr,
               dst == nullptr || check_device_range(src, n, access_kind::read) != CUDA_SUCCESS)
SIM_ASYNC_COPY(cuMemcpyDtoDAsync_v2, false, CUdeviceptr, CUdeviceptr,
               check_device_range(dst, n, access_kind::write) != CUDA_SUCCESS ||
                   check_device_range(src, n, access_kind::read) != CUDA_SUCCESS)
SIM_ASYNC_COPY(cuMemcpyDtoDAsync_v2_ptsz, true, CUdeviceptr, CUdeviceptr,
               check_device_range(dst, n, access_kind::write) != CUDA_SUCCESS ||
                   check_device_range(src, n, access_kind::read) != CUDA_SUCCESS)
#undef SIM_ASYNC_COPY

// ---- peer copies --------------------------------------------------------------
// They work with or without peer access (CUDA stages them otherwise); each pointer
// must lie in an allocation on its context's device.

namespace {

CUresult check_peer(CUdeviceptr p, CUcontext h, std::size_t n, access_kind how) {
  context* c = context_from_handle(h);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;  // guessed
  auto const a = static_cast<std::uintptr_t>(p);
  pointer_info info;
  if (!lookup_pointer(a, &info) || info.device != c->device) return CUDA_ERROR_INVALID_VALUE;
  return check_device_range(a, n, how);
}

}  // namespace

CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n) {
  SIM_ENTRY("cuMemcpyPeer");
  SIM_REQUIRE_INIT();
  if (n == 0) return CUDA_SUCCESS;
  if (CUresult r = check_peer(dst, dst_ctx, n, access_kind::write); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_peer(src, src_ctx, n, access_kind::read); r != CUDA_SUCCESS) return r;
  return run_sync("cuMemcpyPeer", copy(reinterpret_cast<void*>(dst), reinterpret_cast<void const*>(src), n));
}

namespace {

CUresult peer_async(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, std::size_t n, CUstream h,
                    bool ptsz, char const* entry) {
  if (CUresult r = init_status(); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (CUresult r = check_peer(dst, dst_ctx, n, access_kind::write); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_peer(src, src_ctx, n, access_kind::read); r != CUDA_SUCCESS) return r;
  return run_async(h, ptsz, entry, copy(reinterpret_cast<void*>(dst), reinterpret_cast<void const*>(src), n));
}

}  // namespace

CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                           CUstream h) {
  SIM_ENTRY("cuMemcpyPeerAsync");
  return peer_async(dst, dst_ctx, src, src_ctx, n, h, false, "cuMemcpyPeerAsync");
}

SIM_EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                           size_t n, CUstream h) {
  SIM_ENTRY("cuMemcpyPeerAsync_ptsz");
  return peer_async(dst, dst_ctx, src, src_ctx, n, h, true, "cuMemcpyPeerAsync_ptsz");
}
