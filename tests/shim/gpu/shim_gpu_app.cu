// Real-GPU check of the shim (scripts/gpu-check-shim.sh builds this with nvcc, with
// the static runtime (default) and with -cudart shared). Kernels really use the
// memory: served allocations, safe mode against a kernel still running after
// cudaFree, and a capture with graph memory while another thread grows the pool.
#include "../programs/app_support.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

__global__ void fill(unsigned char* p, std::size_t n, unsigned char v) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}

__global__ void late_write(unsigned char* p, std::size_t n, unsigned char v, long long cycles) {
  long long const start = clock64();
  while (clock64() - start < cycles) {}
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}

bool all_equal(void const* dev, std::size_t n, unsigned char v) {
  std::vector<unsigned char> h(n);
  if (cudaMemcpy(h.data(), dev, n, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  for (auto x : h) {
    if (x != v) return false;
  }
  return true;
}

void served() {
  std::vector<void*> ps;
  std::size_t const sizes[] = {256, 4096, 100000, 1 << 20, 64 << 20};
  for (std::size_t n : sizes) {
    void* p = nullptr;
    APP_CHECK_EQ(cudaMalloc(&p, n), cudaSuccess);
    fill<<<64, 256>>>(static_cast<unsigned char*>(p), n, 7);
    APP_CHECK(all_equal(p, n, 7));
    ps.push_back(p);
  }
  cudaStream_t s = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  for (int i = 0; i < 100; ++i) {
    void* a = nullptr;
    APP_CHECK_EQ(cudaMallocAsync(&a, 1 << 16, s), cudaSuccess);
    fill<<<16, 256, 0, s>>>(static_cast<unsigned char*>(a), 1 << 16, 1);
    APP_CHECK_EQ(cudaFreeAsync(a, s), cudaSuccess);
  }
  APP_CHECK_EQ(cudaStreamSynchronize(s), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
  for (void* p : ps) APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  std::size_t f = 0, t = 0;
  APP_CHECK_EQ(cudaMemGetInfo(&f, &t), cudaSuccess);
  APP_CHECK(f > 0 && f <= t);
  gpumem_shim_stats const st = app_stats();
  if (st.mode == GPUMEM_SHIM_MODE_ACTIVE) {
    APP_CHECK_EQ(st.chain_allocations, 105);
    APP_CHECK_EQ(st.chain_frees, 105);
    APP_CHECK_EQ(st.live_allocations, 0);
  }
}

void safe() {
  cudaStream_t s = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  std::size_t const n = 1 << 20;
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, n), cudaSuccess);
  late_write<<<64, 256, 0, s>>>(static_cast<unsigned char*>(p), n, 0xAB, 200000000LL);  // ~0.1 s
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  void* q = nullptr;
  APP_CHECK_EQ(cudaMalloc(&q, n), cudaSuccess);
  APP_CHECK_EQ(cudaMemset(q, 0, n), cudaSuccess);
  APP_CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  APP_CHECK(all_equal(q, n, 0));
  printf("REUSED %d\n", p == q ? 1 : 0);
  APP_CHECK_EQ(cudaFree(q), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
}

void capture() {
  cudaStream_t s = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  void* warm = nullptr;
  APP_CHECK_EQ(cudaMalloc(&warm, 4096), cudaSuccess);
  APP_CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  void* g = nullptr;
  APP_CHECK_EQ(cudaMallocAsync(&g, 1 << 20, s), cudaSuccess);
  fill<<<16, 256, 0, s>>>(static_cast<unsigned char*>(g), 1 << 20, 3);
  APP_CHECK_EQ(cudaFreeAsync(g, s), cudaSuccess);
  std::thread other([&] {
    // In relaxed mode, as PyTorch's allocator allocates during captures (in global
    // mode CUDA refuses: below).
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    APP_CHECK_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
    void* big = nullptr;
    APP_CHECK_EQ(cudaMalloc(&big, 256 << 20), cudaSuccess);  // pool growth during the capture
    APP_CHECK_EQ(cudaFree(big), cudaSuccess);
    APP_CHECK_EQ(cudaFree(warm), cudaSuccess);
    APP_CHECK_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  });
  other.join();
  cudaGraph_t graph = nullptr;
  APP_CHECK_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  if (graph != nullptr) {
    APP_CHECK_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    APP_CHECK_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    APP_CHECK_EQ(cudaStreamSynchronize(s), cudaSuccess);
    APP_CHECK_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    APP_CHECK_EQ(cudaGraphDestroy(graph), cudaSuccess);
  }
  // Calls CUDA refuses during a capture are refused, and the capture invalidated, as
  // without gpumem: another thread's cudaMalloc in global mode during a global
  // capture, and the capturing thread's own cudaFree (the block stays allocated).
  APP_CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaError_t refused = cudaSuccess;
  std::thread([&] {
    void* q = nullptr;
    refused = cudaMalloc(&q, 4096);
  }).join();
  APP_CHECK_EQ(refused, cudaErrorStreamCaptureUnsupported);
  graph = nullptr;
  APP_CHECK_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  void* kept = nullptr;
  APP_CHECK_EQ(cudaMalloc(&kept, 4096), cudaSuccess);
  APP_CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  APP_CHECK_EQ(cudaFree(kept), cudaErrorStreamCaptureUnsupported);
  APP_CHECK_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  APP_CHECK_EQ(cudaFree(kept), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
  if (app_shim_active()) APP_CHECK_EQ(app_stats().captured_passthroughs, 1);
}

void errors() {
  void* p = reinterpret_cast<void*>(1);
  APP_CHECK_EQ(cudaMalloc(&p, 0), cudaSuccess);
  APP_CHECK(p == nullptr);
  APP_CHECK_EQ(cudaMalloc(&p, std::size_t{1} << 62), cudaErrorMemoryAllocation);
  APP_CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  APP_CHECK_EQ(cudaGetLastError(), cudaSuccess);
  void* q = nullptr;
  APP_CHECK_EQ(cudaMalloc(&q, 4096), cudaSuccess);
  APP_CHECK_EQ(cudaFree(q), cudaSuccess);
  APP_CHECK_EQ(cudaFree(q), cudaErrorInvalidValue);
  APP_CHECK_EQ(cudaFree(reinterpret_cast<void*>(0xdeadbeef00)), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  void* r = nullptr;
  APP_CHECK_EQ(cudaMalloc(&r, 4096), cudaSuccess);
  fill<<<1, 256>>>(static_cast<unsigned char*>(r), 4096, 9);
  APP_CHECK(all_equal(r, 4096, 9));
  APP_CHECK_EQ(cudaFree(r), cudaSuccess);
}

}  // namespace

int main(int argc, char** argv) {
  std::string const scenario = argc > 1 ? argv[1] : "served";
  if (scenario == "served")
    served();
  else if (scenario == "safe")
    safe();
  else if (scenario == "capture")
    capture();
  else if (scenario == "errors")
    errors();
  else {
    fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  }
  return app_finish(scenario.c_str());
}
