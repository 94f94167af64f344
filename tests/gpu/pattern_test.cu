// GPU-only: every byte of every live allocation holds a distinct pattern.
//
// For each resource (and a chain), rounds of random allocations on four
// streams; a kernel fills each new buffer with a pattern derived from its id and
// byte offset, random buffers are freed and replaced, and after each round a
// verify kernel checks every byte of every live buffer. Two live allocations
// that overlapped, or a pointer into memory the device cannot write, show up as
// mismatches (or a CUDA fault). Run by scripts/gpu-check on a real GPU.
#include <gpumem/async_memory_resource.hpp>
#include <gpumem/binning_memory_resource.hpp>
#include <gpumem/cuda_memory_resource.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/fixed_size_memory_resource.hpp>
#include <gpumem/managed_memory_resource.hpp>
#include <gpumem/pool_memory_resource.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <random>
#include <vector>

namespace {

__device__ __forceinline__ unsigned char pattern(unsigned id, unsigned long long i) {
  return static_cast<unsigned char>((id * 131u) ^ (i * 7u) ^ (i >> 8));
}

__global__ void fill(unsigned char* p, unsigned long long n, unsigned id) {
  for (auto i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < n; i += 1ull * gridDim.x * blockDim.x)
    p[i] = pattern(id, i);
}

__global__ void verify(unsigned char const* p, unsigned long long n, unsigned id, unsigned long long* bad) {
  unsigned long long local = 0;
  for (auto i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < n; i += 1ull * gridDim.x * blockDim.x)
    local += p[i] != pattern(id, i);
  if (local) atomicAdd(bad, local);
}

struct live {
  unsigned char* p;
  std::size_t n;
  unsigned id;
  cudaStream_t s;
};

void check(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

// Returns the number of mismatched bytes seen; buffers up to max_bytes.
unsigned long long exercise(gpumem::device_memory_resource& mr, std::size_t max_bytes, int rounds, unsigned seed) {
  std::mt19937_64 rng{seed};
  std::vector<cudaStream_t> streams(4);
  for (auto& s : streams) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned long long* bad = nullptr;
  check(cudaMallocManaged(&bad, sizeof *bad));
  *bad = 0;
  std::vector<live> buffers;
  unsigned next_id = 1;
  auto add = [&] {
    // Log-uniform sizes: many small, some large, odd sizes included.
    std::uniform_real_distribution<double> e{0.0, std::log2(static_cast<double>(max_bytes))};
    auto n = static_cast<std::size_t>(std::exp2(e(rng))) + rng() % 97;
    n = std::min(n, max_bytes);
    cudaStream_t s = streams[rng() % streams.size()];
    auto* p = static_cast<unsigned char*>(mr.allocate(n, gpumem::stream_ref{s}));
    fill<<<256, 256, 0, s>>>(p, n, next_id);
    buffers.push_back({p, n, next_id++, s});
  };
  for (int i = 0; i < 64; ++i) add();
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 24 && !buffers.empty(); ++k) {  // free a random quarter, on its own or another stream
      auto idx = rng() % buffers.size();
      auto b = buffers[idx];
      buffers.erase(buffers.begin() + static_cast<long>(idx));
      cudaStream_t fs = (rng() & 1) ? b.s : streams[rng() % streams.size()];
      if (fs != b.s) {  // a free on another stream must be ordered after the writer's work
        cudaEvent_t ev;
        check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        check(cudaEventRecord(ev, b.s));
        check(cudaStreamWaitEvent(fs, ev, 0));
        check(cudaEventDestroy(ev));
      }
      mr.deallocate(b.p, b.n, gpumem::stream_ref{fs});
    }
    for (int k = 0; k < 24; ++k) add();
    check(cudaDeviceSynchronize());
    for (auto const& b : buffers) verify<<<256, 256, 0, b.s>>>(b.p, b.n, b.id, bad);
    check(cudaDeviceSynchronize());
  }
  for (auto const& b : buffers) mr.deallocate(b.p, b.n, gpumem::stream_ref{b.s});
  check(cudaDeviceSynchronize());
  unsigned long long const result = *bad;
  check(cudaFree(bad));
  for (auto s : streams) {
    mr.stream_destroyed(gpumem::stream_ref{s});  // the contract: before the stream goes away
    check(cudaStreamDestroy(s));
  }
  return result;
}

class GpuPattern : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
    check(cudaFree(nullptr));  // the runtime's primary context, shared with gpumem's driver calls
  }
};

constexpr std::size_t MiB = std::size_t{1} << 20;

TEST_F(GpuPattern, Cuda) {
  gpumem::cuda_memory_resource mr;
  EXPECT_EQ(exercise(mr, 64 * MiB, 6, 1), 0u);
}
TEST_F(GpuPattern, Async) {
  gpumem::async_memory_resource mr;
  EXPECT_EQ(exercise(mr, 64 * MiB, 6, 2), 0u);
}
TEST_F(GpuPattern, Managed) {
  gpumem::managed_memory_resource mr;
  EXPECT_EQ(exercise(mr, 8 * MiB, 3, 3), 0u);
}
TEST_F(GpuPattern, Pool) {
  gpumem::cuda_memory_resource up;
  gpumem::pool_memory_resource mr{&up, gpumem::pool_options{std::size_t{0}, {}}};
  EXPECT_EQ(exercise(mr, 64 * MiB, 12, 4), 0u);
  EXPECT_GT(mr.release(), 0u);
}
TEST_F(GpuPattern, PoolSmallSlabsManyCoalesces) {
  gpumem::cuda_memory_resource up;
  gpumem::pool_options o{std::size_t{0}, {}};
  o.min_growth = 1 * MiB;
  gpumem::pool_memory_resource mr{&up, o};
  EXPECT_EQ(exercise(mr, 2 * MiB, 20, 5), 0u);
}
TEST_F(GpuPattern, FixedSize) {
  gpumem::cuda_memory_resource up;
  gpumem::fixed_size_memory_resource mr{&up, 1 * MiB, 32};
  EXPECT_EQ(exercise(mr, 1 * MiB, 8, 6), 0u);
}
TEST_F(GpuPattern, BinningOverPool) {
  gpumem::cuda_memory_resource up;
  gpumem::pool_memory_resource pool{&up, gpumem::pool_options{std::size_t{0}, {}}};
  gpumem::binning_memory_resource mr{&pool, std::int8_t{8}, std::int8_t{20}};
  EXPECT_EQ(exercise(mr, 16 * MiB, 10, 7), 0u);
}
TEST_F(GpuPattern, StatisticsOverPoolCountsExactly) {
  gpumem::cuda_memory_resource up;
  gpumem::pool_memory_resource pool{&up, gpumem::pool_options{std::size_t{0}, {}}};
  gpumem::statistics_resource_adaptor mr{&pool};
  EXPECT_EQ(exercise(mr, 16 * MiB, 6, 8), 0u);
  EXPECT_EQ(mr.bytes().current, 0);
  EXPECT_EQ(mr.allocations().current, 0);
  EXPECT_EQ(mr.allocations().total, 64 + 6 * 24);
}

}  // namespace
