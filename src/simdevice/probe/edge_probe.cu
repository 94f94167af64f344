// Prints what real CUDA returns for the simulated device's remaining guessed edge
// cases (src/simdevice/edge_cases.md). GPU only:
//   nvcc -std=c++17 -o edge_probe src/simdevice/probe/edge_probe.cu -lcuda && ./edge_probe
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

static const char* name(CUresult r) {
  const char* n = nullptr;
  cuGetErrorName(r, &n);
  return n != nullptr ? n : "?";
}
#define D(label, expr) std::printf("%-64s -> %s\n", label, name(expr))
#define R(label, expr) std::printf("%-64s -> %s\n", label, cudaGetErrorName(expr))

static std::atomic<int> g_flag{0};
static void slow_set(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  g_flag = 1;
}

int main() {
  cudaFree(nullptr);
  CUcontext ctx = nullptr;
  cuCtxGetCurrent(&ctx);
  CUdeviceptr d = 0;
  cuMemAlloc(&d, 1000);
  CUdeviceptr base = 0;
  size_t size = 0;
  cuMemGetAddressRange(&base, &size, d);
  std::printf("cuMemGetAddressRange size of a 1000-byte cuMemAlloc: %zu\n", size);
  CUmemoryPool pool = reinterpret_cast<CUmemoryPool>(0x1);
  D("cuPointerGetAttribute(MEMPOOL_HANDLE, cuMemAlloc memory)",
    cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, d));
  std::printf("   pool=%p\n", static_cast<void*>(pool));
  D("cuMemsetD32(misaligned)", cuMemsetD32(d + 2, 0, 4));
  unsigned char buf[4096];
  D("cuMemcpyDtoH past the end of the allocation", cuMemcpyDtoH(buf, d + 512, 2048));
  CUdeviceptr m = 0;
  cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL);
  unsigned type = 0;
  D("cuPointerGetAttribute(MEMORY_TYPE, managed)", cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, m));
  std::printf("   type=%u\n", type);
  int ordinal = 7;
  int host = 0;
  CUpointer_attribute a = CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL;
  void* data[] = {&ordinal};
  D("cuPointerGetAttributes(DEVICE_ORDINAL, host)", cuPointerGetAttributes(1, &a, data, (CUdeviceptr)&host));
  std::printf("   ordinal=%d\n", ordinal);
  CUipcMemHandle ih{};
  D("cuIpcGetMemHandle(managed)", cuIpcGetMemHandle(&ih, m));
  D("cuIpcGetMemHandle(interior of cuMemAlloc)", cuIpcGetMemHandle(&ih, d + 256));
  CUdeviceptr opened = 0;
  D("cuIpcOpenMemHandle(own handle, same process)",
    cuIpcOpenMemHandle(&opened, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  cudaIpcMemHandle_t rh{};
  void* rp = nullptr;
  cudaMalloc(&rp, 4096);
  cudaIpcGetMemHandle(&rh, rp);
  void* ro = nullptr;
  R("cudaIpcOpenMemHandle(own handle, same process)", cudaIpcOpenMemHandle(&ro, rh, cudaIpcMemLazyEnablePeerAccess));
  cudaGetLastError();
  size_t pitch = 0;
  D("cuMemAllocPitch(element size 3)", cuMemAllocPitch(&d, &pitch, 100, 10, 3));
  D("cuStreamDestroy(NULL)", cuStreamDestroy(nullptr));
  CUmemoryPool def = nullptr;
  cuDeviceGetDefaultMemPool(&def, 0);
  D("cuMemPoolDestroy(default pool)", cuMemPoolDestroy(def));
  CUevent ev = nullptr, ev2 = nullptr;
  cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
  cuEventCreate(&ev2, CU_EVENT_DEFAULT);
  D("cuEventQuery(never recorded)", cuEventQuery(ev));
  float ms = 0;
  cuEventRecord(ev, nullptr);
  cuEventRecord(ev2, nullptr);
  cuCtxSynchronize();
  D("cuEventElapsedTime(disable-timing start)", cuEventElapsedTime(&ms, ev, ev2));
  CUstream s = nullptr, c = nullptr, blocking = nullptr;
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  cuStreamCreate(&c, CU_STREAM_NON_BLOCKING);
  cuStreamCreate(&blocking, CU_STREAM_DEFAULT);
  CUdeviceptr x = 0;
  cuMemAllocAsync(&x, 4096, s);
  D("cuMemFreeAsync(x, s)", cuMemFreeAsync(x, s));
  D("cuMemFreeAsync(x, s) again before sync", cuMemFreeAsync(x, s));
  cuStreamSynchronize(s);
  // Does synchronizing the legacy stream wait for blocking-stream work queued after it?
  g_flag = 0;
  cuLaunchHostFunc(blocking, slow_set, nullptr);
  cuStreamSynchronize(nullptr);
  std::printf("legacy sync waited for earlier blocking-stream work: %d\n", g_flag.load());
  cuCtxSynchronize();
  // Capture rules.
  D("BeginCapture(c, global)", cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL));
  cuEventRecord(ev, s);
  D("  cuStreamQuery(other stream) during global capture", cuStreamQuery(s));
  D("  cuEventQuery(uncaptured event) during global capture", cuEventQuery(ev));
  D("  cuEventSynchronize(uncaptured event) during global capture", cuEventSynchronize(ev));
  CUstreamCaptureStatus st{};
  cuStreamIsCapturing(c, &st);
  std::printf("   capture status=%d\n", (int)st);
  CUgraph g = nullptr;
  D("EndCapture", cuStreamEndCapture(c, &g));
  if (g) cuGraphDestroy(g);
  D("BeginCapture(c, global) #2", cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL));
  D("  cuStreamWaitEvent(c, event recorded outside capture)", cuStreamWaitEvent(c, ev, 0));
  cuEventRecord(ev2, c);
  D("  cuEventQuery(captured event)", cuEventQuery(ev2));
  D("EndCapture #2", cuStreamEndCapture(c, &g));
  if (g) cuGraphDestroy(g);
  D("BeginCapture(blocking, relaxed)", cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_RELAXED));
  D("  cuMemsetD8Async on the legacy stream", cuMemsetD8Async(m, 0, 16, nullptr));
  D("EndCapture #3", cuStreamEndCapture(blocking, &g));
  if (g) cuGraphDestroy(g);
  D("BeginCapture(NULL stream)", cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL));
  D("BeginCapture(c, thread-local)", cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  {
    CUresult other = CUDA_SUCCESS, sync_other = CUDA_SUCCESS;
    std::thread th([&] {
      cuCtxSetCurrent(ctx);
      CUdeviceptr y = 0;
      other = cuMemAlloc(&y, 256);
      if (y) cuMemFree(y);
      sync_other = cuCtxSynchronize();
    });
    th.join();
    std::printf("%-64s -> %s\n", "  other thread cuMemAlloc during thread-local capture", name(other));
    std::printf("%-64s -> %s\n", "  other thread cuCtxSynchronize during thread-local capture", name(sync_other));
  }
  D("EndCapture #4", cuStreamEndCapture(c, &g));
  if (g) cuGraphDestroy(g);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult qr{};
  CUresult r = cuGetProcAddress("cuMemAllocAsync", &fn, 11000, CU_GET_PROC_ADDRESS_DEFAULT, &qr);
  std::printf("cuGetProcAddress(cuMemAllocAsync, 11000) -> %s status=%d fn=%p\n", name(r), (int)qr, fn);
  CUcontext popped = nullptr;
  cuCtxPopCurrent(&popped);
  D("cuCtxPopCurrent on an empty stack", cuCtxPopCurrent(&popped));
  cuCtxSetCurrent(nullptr);
  D("cuMemAlloc without a context", cuMemAlloc(&d, 256));
  D("cuMemFree(0) without a context", cuMemFree(0));
  return 0;
}
