// Memory from cudaMalloc used by work in a GREEN CONTEXT (cuGreenCtxCreate: a
// partition of the device's SMs that shares the primary context's memory), freed
// with cudaFree while that work still runs. cudaFree's promise (docs/cuda-semantics.md)
// covers every stream of the device, green contexts' streams included: the block must
// not reach a new owner before the old work finished. For a real GPU, with or without
// gpumem.
//
// Each round: p = cudaMalloc(bytes) with the primary context current; on the green
// side a kernel spins ~spin_us, then fills p with pattern A; the host frees p at once;
// q = cudaMalloc(bytes) (a pool hands back p's block once it judges it free); a kernel
// on a non-blocking stream of the primary context fills q with pattern B; after
// synchronizing everything, every word of q must be B. A word that is A is the old
// work landing on the new owner's memory.
//
// The green side, one scenario each (--rounds per scenario):
//   stream    a stream from cuGreenCtxStreamCreate
//   default   the green context's own default stream (green context current, stream 0)
//   blocking  a blocking stream made with cuStreamCreate while the green context is current
//   destroyed a stream from cuGreenCtxStreamCreate, destroyed right after the launch
//
//   green_context_test [--rounds N] [--mib M] [--spin-us U]
//
// Also prints what the driver answers for the calls a barrier over green contexts
// would make (an event of the primary context recorded on a green stream,
// cuGreenCtxRecordEvent, cuGreenCtxWaitEvent).
// Prints "corrupted_words=W reused=R rounds=N" per scenario and PASS/FAIL; exits 0
// only when no word was corrupted and no CUDA call failed; exits 0 with "skipped"
// where the driver has no green contexts.
//
// Build: the GPU tests of CMake (-DGPUMEM_BUILD_GPU_TESTS=ON).

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

long failures = 0;

#define CHECK_RT(call)                                                                      \
  do {                                                                                      \
    cudaError_t const e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                                \
      ++failures;                                                                           \
      std::fprintf(stderr, "%s -> %s at line %d\n", #call, cudaGetErrorName(e_), __LINE__); \
    }                                                                                       \
  } while (0)

#define CHECK_DRV(call)                                                                         \
  do {                                                                                          \
    CUresult const r_ = (call);                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                                   \
      ++failures;                                                                               \
      char const* n_ = nullptr;                                                                 \
      cuGetErrorName(r_, &n_);                                                                  \
      std::fprintf(stderr, "%s -> %s at line %d\n", #call, n_ != nullptr ? n_ : "?", __LINE__); \
    }                                                                                           \
  } while (0)

char const* name_of(CUresult r) {
  char const* n = nullptr;
  cuGetErrorName(r, &n);
  return n != nullptr ? n : "?";
}

__global__ void spin_then_fill(std::uint32_t* p, std::size_t words, std::uint32_t value, long long spin_cycles) {
  long long const start = clock64();
  while (clock64() - start < spin_cycles) {}
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    p[i] = value;
  }
}

__global__ void count_not(std::uint32_t const* p, std::size_t words, std::uint32_t value, unsigned long long* bad) {
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    mine += p[i] != value ? 1 : 0;
  }
  if (mine != 0) atomicAdd(bad, mine);
}

enum class side { stream, default_stream, blocking, destroyed };

struct result {
  unsigned long long corrupted = 0;
  int reused = 0;
};

result run(side where, int rounds, std::size_t bytes, long long spin_cycles, CUgreenCtx green, CUcontext green_ctx,
           CUcontext primary) {
  result out;
  std::size_t const words = bytes / 4;
  cudaStream_t mine = nullptr;  // the new owner's stream (primary context)
  CHECK_RT(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking));
  CUstream green_stream = nullptr;
  if (where == side::stream) {
    CHECK_DRV(cuGreenCtxStreamCreate(&green_stream, green, CU_STREAM_NON_BLOCKING, 0));
  } else if (where == side::blocking) {
    CHECK_DRV(cuCtxSetCurrent(green_ctx));
    CHECK_DRV(cuStreamCreate(&green_stream, CU_STREAM_DEFAULT));
    CHECK_DRV(cuCtxSetCurrent(primary));
  }
  unsigned long long* bad = nullptr;
  CHECK_RT(cudaMalloc(&bad, sizeof *bad));
  for (int round = 0; round < rounds; ++round) {
    auto const old_value = static_cast<std::uint32_t>(0xA0000000U + round);
    auto const new_value = static_cast<std::uint32_t>(0xB0000000U + round);
    void* p = nullptr;
    CHECK_RT(cudaMalloc(&p, bytes));
    if (p == nullptr) break;
    // The old owner's work, in the green context.
    if (where == side::default_stream) CHECK_DRV(cuCtxSetCurrent(green_ctx));
    if (where == side::destroyed) CHECK_DRV(cuGreenCtxStreamCreate(&green_stream, green, CU_STREAM_NON_BLOCKING, 0));
    spin_then_fill<<<64, 256, 0, static_cast<cudaStream_t>(green_stream)>>>(static_cast<std::uint32_t*>(p), words,
                                                                            old_value, spin_cycles);
    CHECK_RT(cudaGetLastError());
    if (where == side::default_stream) CHECK_DRV(cuCtxSetCurrent(primary));
    if (where == side::destroyed) {  // its work still runs
      CHECK_DRV(cuStreamDestroy(green_stream));
      green_stream = nullptr;
    }
    CHECK_RT(cudaFree(p));  // at once: the kernel is still spinning
    void* q = nullptr;
    CHECK_RT(cudaMalloc(&q, bytes));
    if (q == nullptr) break;
    if (q == p) ++out.reused;
    spin_then_fill<<<64, 256, 0, mine>>>(static_cast<std::uint32_t*>(q), words, new_value, 0);
    CHECK_RT(cudaGetLastError());
    CHECK_RT(cudaStreamSynchronize(mine));
    // Everything, the green context's work included, before the check.
    CHECK_DRV(cuCtxSetCurrent(green_ctx));
    CHECK_DRV(cuCtxSynchronize());
    CHECK_DRV(cuCtxSetCurrent(primary));
    CHECK_RT(cudaDeviceSynchronize());
    CHECK_RT(cudaMemsetAsync(bad, 0, sizeof *bad, mine));
    count_not<<<64, 256, 0, mine>>>(static_cast<std::uint32_t const*>(q), words, new_value, bad);
    unsigned long long n = 0;
    CHECK_RT(cudaMemcpyAsync(&n, bad, sizeof n, cudaMemcpyDeviceToHost, mine));
    CHECK_RT(cudaStreamSynchronize(mine));
    out.corrupted += n;
    CHECK_RT(cudaFree(q));
  }
  CHECK_RT(cudaFree(bad));
  if (green_stream != nullptr) CHECK_DRV(cuStreamDestroy(green_stream));
  CHECK_RT(cudaStreamDestroy(mine));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 50;
  std::size_t mib = 64;
  long long spin_us = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string const a = argv[i];
    if (a == "--rounds") {
      rounds = std::atoi(argv[i + 1]);
    } else if (a == "--mib") {
      mib = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (a == "--spin-us") {
      spin_us = std::atoll(argv[i + 1]);
    } else {
      std::fprintf(stderr, "green_context_test: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  CHECK_RT(cudaSetDevice(0));
  CHECK_RT(cudaFree(nullptr));  // the primary context, current
  CUcontext primary = nullptr;
  CHECK_DRV(cuCtxGetCurrent(&primary));
  CUdevice dev = 0;
  CHECK_DRV(cuCtxGetDevice(&dev));
  int khz = 0;
  CHECK_RT(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  long long const spin_cycles = spin_us * khz / 1000;

  // Half the SMs for the green context.
  CUdevResource sms{};
  CUresult r = cuDeviceGetDevResource(dev, &sms, CU_DEV_RESOURCE_TYPE_SM);
  if (r != CUDA_SUCCESS) {
    std::printf("skipped: cuDeviceGetDevResource -> %s (no green contexts here)\n", name_of(r));
    return 0;
  }
  CUdevResource part{};
  CUdevResource rest{};
  unsigned groups = 1;
  CHECK_DRV(cuDevSmResourceSplitByCount(&part, &groups, &sms, &rest, 0, sms.sm.smCount / 2));
  CUdevResourceDesc desc = nullptr;
  CHECK_DRV(cuDevResourceGenerateDesc(&desc, &part, 1));
  CUgreenCtx green = nullptr;
  r = cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
  if (r != CUDA_SUCCESS) {
    std::printf("skipped: cuGreenCtxCreate -> %s\n", name_of(r));
    return 0;
  }
  CUcontext green_ctx = nullptr;
  CHECK_DRV(cuCtxFromGreenCtx(&green_ctx, green));
  std::printf("green context: %u of %u SMs\n", part.sm.smCount, sms.sm.smCount);

  // What a barrier over green contexts could use: events of the primary context.
  {
    CUevent e = nullptr;
    CHECK_DRV(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CUstream gs = nullptr;
    CHECK_DRV(cuGreenCtxStreamCreate(&gs, green, CU_STREAM_NON_BLOCKING, 0));
    std::printf("fact: cuEventRecord(primary event, green stream) -> %s\n", name_of(cuEventRecord(e, gs)));
    std::printf("fact: cuStreamWaitEvent(green stream, primary event) -> %s\n", name_of(cuStreamWaitEvent(gs, e, 0)));
    std::printf("fact: cuGreenCtxRecordEvent(green, primary event) -> %s\n", name_of(cuGreenCtxRecordEvent(green, e)));
    std::printf("fact: cuGreenCtxWaitEvent(green, primary event) -> %s\n", name_of(cuGreenCtxWaitEvent(green, e)));
    CUcontext of_stream = nullptr;
    std::printf("fact: cuStreamGetCtx(green stream) -> %s, %s the green context's CUcontext\n",
                name_of(cuStreamGetCtx(gs, &of_stream)), of_stream == green_ctx ? "is" : "is not");
    CUcontext cur = nullptr;
    CHECK_DRV(cuCtxSetCurrent(green_ctx));
    CHECK_DRV(cuCtxGetCurrent(&cur));
    unsigned api = 0;
    std::printf("fact: with the green context current, cuCtxGetApiVersion -> %s; the primary is %s current\n",
                name_of(cuCtxGetApiVersion(cur, &api)), cur == primary ? "still" : "not");
    CHECK_DRV(cuCtxSetCurrent(primary));
    CHECK_DRV(cuStreamSynchronize(gs));
    CHECK_DRV(cuStreamDestroy(gs));
    CHECK_DRV(cuEventDestroy(e));
  }

  bool ok = true;
  struct {
    side where;
    char const* name;
  } const scenarios[] = {{side::stream, "stream"},
                         {side::default_stream, "default"},
                         {side::blocking, "blocking"},
                         {side::destroyed, "destroyed"}};
  for (auto const& s : scenarios) {
    long const failed_before = failures;
    result const res = run(s.where, rounds, mib << 20U, spin_cycles, green, green_ctx, primary);
    bool const pass = res.corrupted == 0 && failures == failed_before;
    ok = ok && pass;
    std::printf("%-8s corrupted_words=%llu reused=%d rounds=%d cuda_failures=%ld %s\n", s.name, res.corrupted,
                res.reused, rounds, failures - failed_before, pass ? "PASS" : "FAIL");
  }
  CHECK_DRV(cuGreenCtxDestroy(green));
  std::printf("%s\n", ok && failures == 0 ? "PASS" : "FAIL");
  return ok && failures == 0 ? 0 : 1;
}
