// Streams, events, host functions, stream capture.

#include "runtime.hpp"

using namespace gpumemsim::rt;

namespace {
CUstream drv(cudaStream_t s) { return reinterpret_cast<CUstream>(s); }
CUevent drv(cudaEvent_t e) { return reinterpret_cast<CUevent>(e); }
}  // namespace

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  SIMRT_INIT();
  return record(driver().cuStreamCreate(reinterpret_cast<CUstream*>(stream), CU_STREAM_DEFAULT));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  SIMRT_INIT();
  return record(driver().cuStreamCreate(reinterpret_cast<CUstream*>(stream), flags));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  SIMRT_INIT();
  return record(driver().cuStreamDestroy(drv(stream)));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  SIMRT_INIT();
  return record(driver().cuStreamSynchronize(drv(stream)));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  SIMRT_INIT();
  CUresult const r = driver().cuStreamQuery(drv(stream));
  // Not ready is an answer, not an error: it does not become the last error.
  return r == CUDA_ERROR_NOT_READY ? cudaErrorNotReady : record(r);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  SIMRT_INIT();
  return record(driver().cuStreamWaitEvent(drv(stream), drv(event), flags));
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  SIMRT_INIT();
  return record(driver().cuEventCreate(reinterpret_cast<CUevent*>(event), CU_EVENT_DEFAULT));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  SIMRT_INIT();
  return record(driver().cuEventCreate(reinterpret_cast<CUevent*>(event), flags));
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  SIMRT_INIT();
  return record(driver().cuEventRecord(drv(event), drv(stream)));
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  SIMRT_INIT();
  CUresult const r = driver().cuEventQuery(drv(event));
  return r == CUDA_ERROR_NOT_READY ? cudaErrorNotReady : record(r);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  SIMRT_INIT();
  return record(driver().cuEventSynchronize(drv(event)));
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  SIMRT_INIT();
  return record(driver().cuEventDestroy(drv(event)));
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  SIMRT_INIT();
  return record(driver().cuEventElapsedTime(ms, drv(start), drv(end)));
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  SIMRT_INIT();
  return record(driver().cuLaunchHostFunc(drv(stream), fn, userData));
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  SIMRT_INIT();
  return record(driver().cuStreamBeginCapture(drv(stream), static_cast<CUstreamCaptureMode>(mode)));
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  SIMRT_INIT();
  return record(driver().cuThreadExchangeStreamCaptureMode(reinterpret_cast<CUstreamCaptureMode*>(mode)));
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  SIMRT_INIT();
  return record(driver().cuStreamEndCapture(drv(stream), reinterpret_cast<CUgraph*>(graph)));
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  SIMRT_INIT();
  return record(driver().cuStreamIsCapturing(drv(stream), reinterpret_cast<CUstreamCaptureStatus*>(status)));
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  SIMRT_INIT();
  return record(driver().cuGraphDestroy(reinterpret_cast<CUgraph>(graph)));
}
