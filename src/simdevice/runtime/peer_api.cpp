// Peer access and peer copies between devices: cudaDeviceCanAccessPeer,
// cudaDevice{Enable,Disable}PeerAccess, cudaMemcpyPeer{,Async}. The runtime names
// devices; the driver calls take their primary contexts.

#include "runtime.hpp"

#include <cstdint>

using namespace gpumemsim::rt;

namespace {

CUdeviceptr dptr(void const* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

cudaError_t valid_device(int device) noexcept {
  int count = 0;
  if (CUresult r = driver().cuDeviceGetCount(&count); r != CUDA_SUCCESS) return to_runtime_error(r);
  return device >= 0 && device < count ? cudaSuccess : cudaErrorInvalidDevice;
}

}  // namespace

cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  if (canAccessPeer == nullptr) return record(cudaErrorInvalidValue);
  if (driver().status != cudaSuccess) return record(driver().status);
  return record(driver().cuDeviceCanAccessPeer(canAccessPeer, device, peerDevice));
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  SIMRT_INIT();
  if (flags != 0) return record(cudaErrorInvalidValue);
  if (cudaError_t e = valid_device(peerDevice); e != cudaSuccess) return record(e);
  if (peerDevice == current_device()) return record(cudaErrorInvalidDevice);
  CUcontext peer = nullptr;
  if (cudaError_t e = primary_context(peerDevice, &peer); e != cudaSuccess) return record(e);
  return record(driver().cuCtxEnablePeerAccess(peer, 0));
}

cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
  SIMRT_INIT();
  if (cudaError_t e = valid_device(peerDevice); e != cudaSuccess) return record(e);
  CUcontext peer = nullptr;
  if (cudaError_t e = primary_context(peerDevice, &peer); e != cudaSuccess) return record(e);
  return record(driver().cuCtxDisablePeerAccess(peer));
}

namespace {

// The two devices' primary contexts, or the runtime error that prevents a copy.
cudaError_t peer_contexts(int dst_device, int src_device, CUcontext* dst, CUcontext* src) noexcept {
  if (cudaError_t e = valid_device(dst_device); e != cudaSuccess) return e;
  if (cudaError_t e = valid_device(src_device); e != cudaSuccess) return e;
  if (cudaError_t e = primary_context(dst_device, dst); e != cudaSuccess) return e;
  return primary_context(src_device, src);
}

}  // namespace

cudaError_t cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice, size_t count) {
  SIMRT_INIT();
  CUcontext d = nullptr;
  CUcontext s = nullptr;
  if (cudaError_t e = peer_contexts(dstDevice, srcDevice, &d, &s); e != cudaSuccess) return record(e);
  return record(driver().cuMemcpyPeer(dptr(dst), d, dptr(src), s, count));
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                                cudaStream_t stream) {
  SIMRT_INIT();
  CUcontext d = nullptr;
  CUcontext s = nullptr;
  if (cudaError_t e = peer_contexts(dstDevice, srcDevice, &d, &s); e != cudaSuccess) return record(e);
  return record(driver().cuMemcpyPeerAsync(dptr(dst), d, dptr(src), s, count, reinterpret_cast<CUstream>(stream)));
}
