// Prints what real CUDA returns for the edge cases gpumem must reproduce
// (size 0, NULL out-pointers, invalid/interior/double frees, capture rules,
// entry-point lookup). Run on a GPU machine; the simulated device's table
// (src/simdevice/edge_cases.md) is checked against this output.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <cstdio>
#include <thread>

#define SHOW(label, expr)                         \
  do {                                            \
    auto r_ = (expr);                             \
    std::printf("%-58s -> %d\n", label, (int)r_); \
  } while (0)

static const char* drv_name(CUresult r) {
  const char* n = nullptr;
  cuGetErrorName(r, &n);
  return n ? n : "?";
}
#define SHOWD(label, expr)                             \
  do {                                                 \
    CUresult r_ = (expr);                              \
    std::printf("%-58s -> %s\n", label, drv_name(r_)); \
  } while (0)
#define SHOWR(label, expr)                                     \
  do {                                                         \
    cudaError_t r_ = (expr);                                   \
    std::printf("%-58s -> %s\n", label, cudaGetErrorName(r_)); \
  } while (0)

int main() {
  SHOWR("cudaFree(0) [init]", cudaFree(nullptr));
  CUdeviceptr d = 0;
  SHOWD("cuMemAlloc(&d, 0)", cuMemAlloc(&d, 0));
  std::printf("   d after = %llu\n", (unsigned long long)d);
  SHOWD("cuMemAlloc(NULL, 16)", cuMemAlloc(nullptr, 16));
  SHOWD("cuMemAlloc(&d, 1<<62)", cuMemAlloc(&d, 1ull << 62));
  SHOWD("cuMemFree(0)", cuMemFree(0));
  SHOWD("cuMemFree(0xdeadbeef00)", cuMemFree(0xdeadbeef00ull));
  CUdeviceptr a = 0;
  cuMemAlloc(&a, 1 << 20);
  SHOWD("cuMemFree(interior a+256)", cuMemFree(a + 256));
  CUdeviceptr base = 0;
  size_t sz = 0;
  SHOWD("cuMemGetAddressRange(interior)", cuMemGetAddressRange(&base, &sz, a + 256));
  std::printf("   base-a=%lld size=%zu\n", (long long)(base - a), sz);
  SHOWD("cuMemGetAddressRange(NULL,NULL,a)", cuMemGetAddressRange(nullptr, nullptr, a));
  SHOWD("cuMemGetAddressRange(invalid)", cuMemGetAddressRange(&base, &sz, 0xdeadbeef00ull));
  SHOWD("cuMemFree(a)", cuMemFree(a));
  SHOWD("cuMemFree(a) again (double)", cuMemFree(a));

  void* p = reinterpret_cast<void*>(0x1);
  SHOWR("cudaMalloc(&p, 0)", cudaMalloc(&p, 0));
  std::printf("   p after = %p\n", p);
  SHOWR("cudaMalloc(NULL, 16)", cudaMalloc(nullptr, 16));
  SHOWR("  cudaGetLastError", cudaGetLastError());
  SHOWR("cudaMalloc(&p, 1<<62)", cudaMalloc(&p, 1ull << 62));
  SHOWR("  cudaGetLastError", cudaGetLastError());
  SHOWR("  cudaGetLastError again", cudaGetLastError());
  SHOWR("cudaFree(invalid)", cudaFree(reinterpret_cast<void*>(0xdeadbeef00ull)));
  SHOWR("  cudaGetLastError", cudaGetLastError());
  void* q = nullptr;
  cudaMalloc(&q, 4096);
  SHOWR("cudaFree(interior)", cudaFree(static_cast<char*>(q) + 256));
  SHOWR("cudaFree(q)", cudaFree(q));
  SHOWR("cudaFree(q) again (double)", cudaFree(q));

  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  p = reinterpret_cast<void*>(0x1);
  SHOWR("cudaMallocAsync(&p, 0, s)", cudaMallocAsync(&p, 0, s));
  std::printf("   p after = %p\n", p);
  SHOWD("cuMemAllocAsync(&d, 0, s)", cuMemAllocAsync(&d, 0, s));
  SHOWR("cudaFreeAsync(NULL, s)", cudaFreeAsync(nullptr, s));
  SHOWD("cuMemFreeAsync(0, s)", cuMemFreeAsync(0, s));
  SHOWD("cuMemFreeAsync(invalid, s)", cuMemFreeAsync(0xdeadbeef00ull, s));
  SHOWR("  cudaStreamSynchronize", cudaStreamSynchronize(s));
  SHOWR("cudaMallocManaged(&p, 0)", cudaMallocManaged(&p, 0));
  SHOWD("cuMemAllocManaged(&d, 0)", cuMemAllocManaged(&d, 0, CU_MEM_ATTACH_GLOBAL));
  size_t pitch = 7;
  SHOWR("cudaMallocPitch(&p,&pitch,0,0)", cudaMallocPitch(&p, &pitch, 0, 0));
  std::printf("   p=%p pitch=%zu\n", p, pitch);
  SHOWR("cudaMallocPitch(&p,&pitch,100,10)", cudaMallocPitch(&p, &pitch, 100, 10));
  std::printf("   pitch=%zu\n", pitch);
  cudaFree(p);
  SHOWD("cuMemAllocPitch(&d,&pitch,0,0,4)", cuMemAllocPitch(&d, &pitch, 0, 0, 4));
  SHOWD("cuMemAllocPitch(&d,&pitch,100,10,4)", cuMemAllocPitch(&d, &pitch, 100, 10, 4));
  std::printf("   pitch=%zu\n", pitch);
  cuMemFree(d);
  size_t f = 0, t = 0;
  SHOWR("cudaMemGetInfo(NULL, &t)", cudaMemGetInfo(nullptr, &t));
  SHOWD("cuMemGetInfo(NULL, &t)", cuMemGetInfo(nullptr, &t));
  SHOWD("cuMemGetInfo(&f, NULL)", cuMemGetInfo(&f, nullptr));
  cudaPointerAttributes at{};
  SHOWR("cudaPointerGetAttributes(invalid)", cudaPointerGetAttributes(&at, reinterpret_cast<void*>(0xdeadbeef00ull)));
  std::printf("   type=%d\n", (int)at.type);
  SHOWR("  cudaGetLastError", cudaGetLastError());
  SHOWR("cudaPointerGetAttributes(NULL)", cudaPointerGetAttributes(&at, nullptr));
  std::printf("   type=%d\n", (int)at.type);

  // Cross-API frees.
  void* x = nullptr;
  cudaMallocAsync(&x, 1 << 20, s);
  cudaStreamSynchronize(s);
  SHOWR("cudaFree(async memory)", cudaFree(x));
  cudaMalloc(&x, 1 << 20);
  SHOWR("cudaFreeAsync(cudaMalloc memory)", cudaFreeAsync(x, s));
  SHOWR("  cudaStreamSynchronize", cudaStreamSynchronize(s));
  cudaMalloc(&x, 1 << 20);
  SHOWD("cuMemFreeAsync(cudaMalloc memory)", cuMemFreeAsync((CUdeviceptr)x, s));
  cudaStreamSynchronize(s);

  // Capture rules.
  cudaStream_t c;
  cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking);
  cudaEvent_t e;
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  SHOWR("BeginCapture(c, global)", cudaStreamBeginCapture(c, cudaStreamCaptureModeGlobal));
  SHOWD("  cuMemAlloc during global capture (same thread)", cuMemAlloc(&d, 4096));
  if (d) cuMemFree(d);
  SHOWR("  cudaMalloc during global capture", cudaMalloc(&x, 4096));
  cudaStreamCaptureStatus st{};
  SHOWR("  cudaStreamIsCapturing(c)", cudaStreamIsCapturing(c, &st));
  std::printf("   status=%d\n", (int)st);
  SHOWR("  cudaEventRecord(e, s) [other stream]", cudaEventRecord(e, s));
  SHOWR("  cudaStreamWaitEvent(s, e)", cudaStreamWaitEvent(s, e, 0));
  SHOWR("  cudaStreamSynchronize(s) [other stream]", cudaStreamSynchronize(s));
  void* g = nullptr;
  SHOWR("  cudaMallocAsync on capturing c", cudaMallocAsync(&g, 1 << 20, c));
  SHOWR("  cudaFreeAsync on capturing c", cudaFreeAsync(g, c));
  {
    CUresult rt = CUDA_SUCCESS, rs = CUDA_SUCCESS;
    std::thread th([&] {
      cudaSetDevice(0);
      CUdeviceptr dd = 0;
      rt = cuMemAlloc(&dd, 4096);
      if (dd) cuMemFree(dd);
      rs = cuCtxSynchronize();
    });
    th.join();
    std::printf("%-58s -> %s\n", "  other thread cuMemAlloc+cuMemFree during capture", drv_name(rt));
    std::printf("%-58s -> %s\n", "  other thread cuCtxSynchronize during capture", drv_name(rs));
  }
  cudaGraph_t graph = nullptr;
  SHOWR("EndCapture", cudaStreamEndCapture(c, &graph));
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();

  SHOWR("BeginCapture(c, global) #2", cudaStreamBeginCapture(c, cudaStreamCaptureModeGlobal));
  {
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    SHOWD("  exchange mode -> relaxed", cuThreadExchangeStreamCaptureMode(&m));
    SHOWD("  cuCtxSynchronize in relaxed mode", cuCtxSynchronize());
    SHOWD("  cuMemAlloc in relaxed mode", cuMemAlloc(&d, 4096));
    if (d) SHOWD("  cuMemFree in relaxed mode", cuMemFree(d));
    SHOWD("  exchange mode back", cuThreadExchangeStreamCaptureMode(&m));
  }
  graph = nullptr;
  SHOWR("EndCapture #2", cudaStreamEndCapture(c, &graph));
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();

  // Entry-point lookup.
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  void* v2 = dlsym(h, "cuMemAlloc_v2");
  void* v1 = dlsym(h, "cuMemAlloc");
  void* fn = nullptr;
  CUdriverProcAddressQueryResult qr{};
  cuGetProcAddress("cuMemAlloc", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &qr);
  std::printf("cuGetProcAddress(cuMemAlloc,13000) == dlsym _v2: %d, == v1: %d\n", fn == v2, fn == v1);
  cuGetProcAddress("cuMemAlloc", &fn, 3000, CU_GET_PROC_ADDRESS_DEFAULT, &qr);
  std::printf("cuGetProcAddress(cuMemAlloc,3000)  == dlsym _v2: %d, == v1: %d\n", fn == v2, fn == v1);
  void* gpa2 = dlsym(h, "cuGetProcAddress_v2");
  void* gpa1 = dlsym(h, "cuGetProcAddress");
  cuGetProcAddress("cuGetProcAddress", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &qr);
  std::printf("cuGetProcAddress(cuGetProcAddress,13000) == _v2: %d == v1: %d\n", fn == gpa2, fn == gpa1);
  cuGetProcAddress("cuMemAllocAsync", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &qr);
  std::printf("cuGetProcAddress(cuMemAllocAsync, ptds) == _ptsz: %d\n", fn == dlsym(h, "cuMemAllocAsync_ptsz"));
  cuGetProcAddress("cuMemAlloc", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &qr);
  std::printf("cuGetProcAddress(cuMemAlloc, ptds) == _v2: %d\n", fn == v2);
  CUresult nf = cuGetProcAddress("cuNoSuchThing", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &qr);
  std::printf("cuGetProcAddress(unknown) -> %s status=%d fn=%p\n", drv_name(nf), (int)qr, fn);
  cudaDriverEntryPointQueryResult rq{};
  cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &rq);
  std::printf("cudaGetDriverEntryPoint(cuMemAlloc) == _v2: %d\n", fn == v2);
  int dev_count = 0;
  cudaGetDeviceCount(&dev_count);
  std::printf("devices=%d\n", dev_count);
  return 0;
}
