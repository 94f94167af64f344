// cuGetProcAddress / cuGetProcAddress_v2: the driver's own symbol resolver.
// Each base name maps to the ABI version the caller's cudaVersion expects and,
// with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, to its _ptsz variant.
// To add an entry point: implement it, then add a row (and a _ptsz column if any).

#include "sim_api.hpp"

#include <cstring>
#include <iterator>

// Exports that cuda.h declares under other names or not at all.
#undef cuGetProcAddress
#undef cuEventElapsedTime
extern "C" {
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
CUresult cuEventElapsedTime(float*, CUevent, CUevent);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr*, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult cuMemsetD8Async_ptsz(CUdeviceptr, unsigned char, size_t, CUstream);
CUresult cuMemsetD32Async_ptsz(CUdeviceptr, unsigned int, size_t, CUstream);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr, const void*, size_t, CUstream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void*, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
CUresult cuStreamSynchronize_ptsz(CUstream);
CUresult cuStreamQuery_ptsz(CUstream);
CUresult cuStreamWaitEvent_ptsz(CUstream, CUevent, unsigned int);
CUresult cuStreamGetFlags_ptsz(CUstream, unsigned int*);
CUresult cuStreamGetCtx_ptsz(CUstream, CUcontext*);
CUresult cuLaunchHostFunc_ptsz(CUstream, CUhostFn, void*);
CUresult cuStreamAddCallback_ptsz(CUstream, CUstreamCallback, void*, unsigned int);
CUresult cuEventRecord_ptsz(CUevent, CUstream);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream, CUstreamCaptureMode);
CUresult cuStreamEndCapture_ptsz(CUstream, CUgraph*);
CUresult cuStreamIsCapturing_ptsz(CUstream, CUstreamCaptureStatus*);
CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**,
                                        const CUgraphEdgeData**, size_t*);
}

namespace {

struct proc_entry {
  char const* name;  ///< base name, as callers ask for it
  int since;         ///< first cudaVersion that gets this ABI version
  void* fn;
  void* ptsz = nullptr;  ///< per-thread-default-stream variant
};

template <class F>
void* fn_ptr(F* f) {
  return reinterpret_cast<void*>(f);
}

#define ROW(base, since, fn) \
  proc_entry { base, since, fn_ptr(&fn) }
#define ROW_PTSZ(base, since, fn) \
  proc_entry { base, since, fn_ptr(&fn), fn_ptr(&fn##_ptsz) }

proc_entry const table[] = {
    ROW("cuInit", 2000, cuInit),
    ROW("cuDriverGetVersion", 2020, cuDriverGetVersion),
    ROW("cuGetErrorName", 6000, cuGetErrorName),
    ROW("cuGetErrorString", 6000, cuGetErrorString),
    ROW("cuGetProcAddress", 11030, cuGetProcAddress),
    ROW("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    ROW("cuDeviceGet", 2000, cuDeviceGet),
    ROW("cuDeviceGetCount", 2000, cuDeviceGetCount),
    ROW("cuDeviceGetName", 2000, cuDeviceGetName),
    ROW("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    ROW("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    ROW("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    ROW("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    ROW("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    ROW("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    ROW("cuDevicePrimaryCtxSetFlags", 11000, cuDevicePrimaryCtxSetFlags_v2),
    ROW("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    ROW("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    ROW("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    ROW("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    ROW("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    ROW("cuCtxGetDevice", 2000, cuCtxGetDevice),
    ROW("cuCtxSynchronize", 2000, cuCtxSynchronize),
    ROW("cuCtxGetApiVersion", 3020, cuCtxGetApiVersion),
    ROW("cuCtxCreate", 12050, cuCtxCreate_v4),
    ROW("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    ROW("cuDeviceGetDevResource", 12040, cuDeviceGetDevResource),
    ROW("cuCtxGetDevResource", 12040, cuCtxGetDevResource),
    ROW("cuGreenCtxGetDevResource", 12040, cuGreenCtxGetDevResource),
    ROW("cuDevSmResourceSplitByCount", 12040, cuDevSmResourceSplitByCount),
    ROW("cuDevResourceGenerateDesc", 12040, cuDevResourceGenerateDesc),
    ROW("cuGreenCtxCreate", 12040, cuGreenCtxCreate),
    ROW("cuGreenCtxDestroy", 12040, cuGreenCtxDestroy),
    ROW("cuCtxFromGreenCtx", 12040, cuCtxFromGreenCtx),
    ROW("cuGreenCtxGetId", 12090, cuGreenCtxGetId),
    ROW("cuGreenCtxStreamCreate", 12050, cuGreenCtxStreamCreate),
    ROW("cuStreamGetGreenCtx", 12040, cuStreamGetGreenCtx),
    ROW("cuGreenCtxRecordEvent", 12040, cuGreenCtxRecordEvent),
    ROW("cuGreenCtxWaitEvent", 12040, cuGreenCtxWaitEvent),
    ROW("cuDeviceCanAccessPeer", 4000, cuDeviceCanAccessPeer),
    ROW("cuCtxEnablePeerAccess", 4000, cuCtxEnablePeerAccess),
    ROW("cuCtxDisablePeerAccess", 4000, cuCtxDisablePeerAccess),
    ROW("cuMemAlloc", 3020, cuMemAlloc_v2),
    ROW("cuMemFree", 3020, cuMemFree_v2),
    ROW("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    ROW("cuMemAllocManaged", 6000, cuMemAllocManaged),
    ROW("cuMemAdvise", 12020, cuMemAdvise_v2),
    ROW("cuMemPrefetchAsync", 12020, cuMemPrefetchAsync_v2),
    ROW("cuMemHostAlloc", 2020, cuMemHostAlloc),
    ROW("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    ROW("cuMemFreeHost", 2000, cuMemFreeHost),
    ROW("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    ROW("cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    ROW("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    ROW("cuMemHostUnregister", 4000, cuMemHostUnregister),
    ROW("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    ROW("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    ROW("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    ROW("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    ROW_PTSZ("cuMemAllocAsync", 11020, cuMemAllocAsync),
    ROW_PTSZ("cuMemFreeAsync", 11020, cuMemFreeAsync),
    ROW_PTSZ("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    ROW("cuMemPoolCreate", 11020, cuMemPoolCreate),
    ROW("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    ROW("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    ROW("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    ROW("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    ROW("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    ROW("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    ROW("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),
    ROW("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    ROW("cuMemAddressReserve", 10020, cuMemAddressReserve),
    ROW("cuMemAddressFree", 10020, cuMemAddressFree),
    ROW("cuMemCreate", 10020, cuMemCreate),
    ROW("cuMemRelease", 10020, cuMemRelease),
    ROW("cuMemMap", 10020, cuMemMap),
    ROW("cuMemUnmap", 10020, cuMemUnmap),
    ROW("cuMemSetAccess", 10020, cuMemSetAccess),
    ROW("cuMemGetAccess", 10020, cuMemGetAccess),
    ROW("cuMemGetAllocationPropertiesFromHandle", 10020, cuMemGetAllocationPropertiesFromHandle),
    ROW("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    ROW("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    ROW("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    ROW("cuMemsetD8", 3020, cuMemsetD8_v2),
    ROW("cuMemsetD32", 3020, cuMemsetD32_v2),
    ROW_PTSZ("cuMemsetD8Async", 3020, cuMemsetD8Async),
    ROW_PTSZ("cuMemsetD32Async", 3020, cuMemsetD32Async),
    ROW("cuMemcpy", 4000, cuMemcpy),
    ROW_PTSZ("cuMemcpyAsync", 4000, cuMemcpyAsync),
    ROW("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
    ROW("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
    ROW("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2),
    ROW_PTSZ("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2),
    ROW_PTSZ("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2),
    ROW_PTSZ("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2),
    ROW("cuMemcpyPeer", 4000, cuMemcpyPeer),
    ROW_PTSZ("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync),
    ROW("cuStreamCreate", 2000, cuStreamCreate),
    ROW("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    ROW("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    ROW_PTSZ("cuStreamSynchronize", 2000, cuStreamSynchronize),
    ROW_PTSZ("cuStreamQuery", 2000, cuStreamQuery),
    ROW_PTSZ("cuStreamWaitEvent", 3020, cuStreamWaitEvent),
    ROW_PTSZ("cuStreamGetFlags", 5050, cuStreamGetFlags),
    ROW("cuStreamGetPriority", 5050, cuStreamGetPriority),
    ROW_PTSZ("cuStreamGetCtx", 9020, cuStreamGetCtx),
    ROW_PTSZ("cuLaunchHostFunc", 10000, cuLaunchHostFunc),
    ROW_PTSZ("cuStreamAddCallback", 5000, cuStreamAddCallback),
    ROW_PTSZ("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2),
    ROW_PTSZ("cuStreamEndCapture", 10000, cuStreamEndCapture),
    ROW_PTSZ("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    ROW_PTSZ("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3),
    ROW("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    ROW("cuGraphDestroy", 10000, cuGraphDestroy),
    ROW("cuGraphGetNodes", 10000, cuGraphGetNodes),
    ROW("cuEventCreate", 2000, cuEventCreate),
    ROW("cuEventDestroy", 4000, cuEventDestroy_v2),
    ROW_PTSZ("cuEventRecord", 2000, cuEventRecord),
    ROW("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags),
    ROW("cuEventQuery", 2000, cuEventQuery),
    ROW("cuEventSynchronize", 2000, cuEventSynchronize),
    ROW("cuEventElapsedTime", 2000, cuEventElapsedTime),
    ROW("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    ROW("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    ROW("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    ROW("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
};

#undef ROW
#undef ROW_PTSZ

CUresult resolve(char const* symbol, void** pfn, int version, cuuint64_t flags,
                 CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cuuint64_t const known = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  bool const per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  proc_entry const* best = nullptr;
  bool name_known = false;
  for (proc_entry const& e : table) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    name_known = true;
    if (e.since <= version && (best == nullptr || e.since > best->since)) best = &e;
  }
  *pfn = nullptr;
  if (best == nullptr) {
    // Measured (driver 580): _v2 succeeds and reports through the status; the v1
    // entry point has no status, so it answers CUDA_ERROR_NOT_FOUND (guessed).
    if (status == nullptr) return CUDA_ERROR_NOT_FOUND;
    *status = name_known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
  }
  *pfn = per_thread && best->ptsz != nullptr ? best->ptsz : best->fn;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  SIM_ENTRY("cuGetProcAddress_v2");
  return resolve(symbol, pfn, cudaVersion, flags, symbolStatus);
}

SIM_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  SIM_ENTRY("cuGetProcAddress");
  return resolve(symbol, pfn, cudaVersion, flags, nullptr);
}
