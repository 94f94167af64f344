// The _ptsz/_ptds exports that programs built with --default-stream per-thread
// call: the NULL stream means the calling thread's per-thread stream.

#include "runtime.hpp"

#define SIMRT_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
cudaStream_t per_thread(cudaStream_t s) { return s == nullptr ? cudaStreamPerThread : s; }
}  // namespace

SIMRT_EXPORT cudaError_t cudaMallocAsync_ptsz(void** p, size_t size, cudaStream_t s) {
  return cudaMallocAsync(p, size, per_thread(s));
}
SIMRT_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void** p, size_t size, cudaMemPool_t pool, cudaStream_t s) {
  return cudaMallocFromPoolAsync(p, size, pool, per_thread(s));
}
SIMRT_EXPORT cudaError_t cudaFreeAsync_ptsz(void* p, cudaStream_t s) { return cudaFreeAsync(p, per_thread(s)); }
SIMRT_EXPORT cudaError_t cudaMemsetAsync_ptsz(void* p, int value, size_t count, cudaStream_t s) {
  return cudaMemsetAsync(p, value, count, per_thread(s));
}
SIMRT_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                              cudaStream_t s) {
  return cudaMemcpyAsync(dst, src, count, kind, per_thread(s));
}
SIMRT_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { return cudaStreamSynchronize(per_thread(s)); }
SIMRT_EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) { return cudaStreamQuery(per_thread(s)); }
SIMRT_EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  return cudaStreamWaitEvent(per_thread(s), e, flags);
}
SIMRT_EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) {
  return cudaEventRecord(e, per_thread(s));
}
SIMRT_EXPORT cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void* data) {
  return cudaLaunchHostFunc(per_thread(s), fn, data);
}
SIMRT_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, cudaStreamCaptureMode mode) {
  return cudaStreamBeginCapture(per_thread(s), mode);
}
SIMRT_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t* g) {
  return cudaStreamEndCapture(per_thread(s), g);
}
SIMRT_EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, cudaStreamCaptureStatus* status) {
  return cudaStreamIsCapturing(per_thread(s), status);
}

// Synchronous forms: queued on the per-thread stream, then waited for.
SIMRT_EXPORT cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (cudaError_t e = cudaMemcpyAsync(dst, src, count, kind, cudaStreamPerThread); e != cudaSuccess) return e;
  return cudaStreamSynchronize(cudaStreamPerThread);
}
SIMRT_EXPORT cudaError_t cudaMemset_ptds(void* p, int value, size_t count) {
  if (cudaError_t e = cudaMemsetAsync(p, value, count, cudaStreamPerThread); e != cudaSuccess) return e;
  return cudaStreamSynchronize(cudaStreamPerThread);
}
