// RAPIDS RMM's resources as contenders: a plugin (built with -DGPUMEM_BENCH_RMM=ON),
// because RMM 26.x compiles against CCCL 3.5 while gpumem uses the toolkit's CCCL 3.0;
// loaded with RTLD_LOCAL, the two never meet.
//
// Each resource sits over statistics_resource_adaptor(cuda_memory_resource), which
// counts what the resource reserves from cudaMalloc (it is called only when the
// resource grows, so it does not slow the measured pairs). Sizes are RMM's defaults
// except where a default would make the comparison meaningless: the pool starts
// empty (initial 0) like gpumem's, so peak reserved shows its growth policy.
#include "contender.hpp"

#include <rmm/aligned.hpp>
#include <rmm/mr/arena_memory_resource.hpp>
#include <rmm/mr/binning_memory_resource.hpp>
#include <rmm/mr/cuda_async_memory_resource.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <rmm/mr/statistics_resource_adaptor.hpp>

#include <cuda_runtime_api.h>
#include <cuda/stream_ref>

#include <atomic>
#include <cstdio>
#include <exception>
#include <string>

namespace {

using gpumem_compare::contender;
using gpumem_compare::contender_kind;
using gpumem_compare::make_or_explain;
using gpumem_compare::memory_usage;
using gpumem_compare::stream_t;

constexpr std::size_t alignment = rmm::CUDA_ALLOCATION_ALIGNMENT;

cuda::stream_ref ref(stream_t s) noexcept { return cuda::stream_ref{static_cast<cudaStream_t>(s)}; }

/// Resource `Top`, built over a statistics adaptor that counts reservations.
template <class Top>
class rmm_contender final : public contender {
 public:
  template <class Make>
  explicit rmm_contender(Make&& make) : top_{make(stats_)} {}

  void* allocate(std::size_t bytes, stream_t s) noexcept override {
    try {
      return top_.allocate(ref(s), bytes, alignment);
    } catch (...) { return nullptr; }
  }
  void deallocate(void* p, std::size_t bytes, stream_t s) noexcept override {
    // A free that throws (RMM reports a bad free with an exception): the block is
    // lost to that contender, the run goes on, and the count is printed at the end.
    // RMM 26.10's arena throws from inside a noexcept function instead, which no
    // catch here can stop: measure_replay leaves it out of the log where it does.
    try {
      top_.deallocate(ref(s), p, bytes, alignment);
    } catch (std::exception const& e) {
      if (refused_frees_++ == 0) first_refusal_ = e.what();
    } catch (...) {
      if (refused_frees_++ == 0) first_refusal_ = "unknown exception";
    }
  }
  ~rmm_contender() override {
    if (refused_frees_ != 0) {
      std::fprintf(stderr, "rmm contender: %zu frees threw (the blocks were leaked); the first: %s\n",
                   refused_frees_.load(), first_refusal_.c_str());
    }
  }
  memory_usage usage() noexcept override {
    auto const c = stats_.get_bytes_counter();
    return {static_cast<std::uint64_t>(c.value), static_cast<std::uint64_t>(c.peak), true};
  }

 private:
  rmm::mr::statistics_resource_adaptor stats_{rmm::mr::cuda_memory_resource{}};
  Top top_;
  std::atomic<std::size_t> refused_frees_{0};
  std::string first_refusal_;  ///< written by the first refusal only
};

/// cuda_async_memory_resource: its own cudaMemPool (release threshold: never), which
/// reports what it reserves itself.
class rmm_async final : public contender {
 public:
  void* allocate(std::size_t bytes, stream_t s) noexcept override {
    try {
      return mr_.allocate(ref(s), bytes, alignment);
    } catch (...) { return nullptr; }
  }
  void deallocate(void* p, std::size_t bytes, stream_t s) noexcept override {
    mr_.deallocate(ref(s), p, bytes, alignment);
  }
  memory_usage usage() noexcept override {
    memory_usage u;
    cuuint64_t now = 0, high = 0;
    u.known = cudaMemPoolGetAttribute(mr_.pool_handle(), cudaMemPoolAttrReservedMemCurrent, &now) == cudaSuccess &&
              cudaMemPoolGetAttribute(mr_.pool_handle(), cudaMemPoolAttrReservedMemHigh, &high) == cudaSuccess;
    u.reserved = now;
    u.peak_reserved = high;
    return u;
  }
  ~rmm_async() override { static_cast<void>(cudaDeviceSynchronize()); }

 private:
  rmm::mr::cuda_async_memory_resource mr_{};
};

/// binning_memory_resource (bins 256 B..1 MiB, as gpumem's) over a pool over the statistics adaptor.
class binning_over_pool {
 public:
  explicit binning_over_pool(rmm::mr::statistics_resource_adaptor& up) : pool_{up, 0}, binning_{pool_, 8, 20} {}
  void* allocate(cuda::stream_ref s, std::size_t bytes, std::size_t align) {
    return binning_.allocate(s, bytes, align);
  }
  void deallocate(cuda::stream_ref s, void* p, std::size_t bytes, std::size_t align) noexcept {
    binning_.deallocate(s, p, bytes, align);
  }

 private:
  rmm::mr::pool_memory_resource pool_;
  rmm::mr::binning_memory_resource binning_;
};

contender* make_pool(char const** why) {
  return make_or_explain(
      [] {
        return new rmm_contender<rmm::mr::pool_memory_resource>{[](auto& up) {
          return rmm::mr::pool_memory_resource{up, 0};
        }};
      },
      why);
}

contender* make_arena(char const** why) {
  return make_or_explain(
      [] {
        return new rmm_contender<rmm::mr::arena_memory_resource>{
            [](auto& up) { return rmm::mr::arena_memory_resource{up}; }};
      },
      why);
}

contender* make_binning(char const** why) {
  return make_or_explain(
      [] { return new rmm_contender<binning_over_pool>{[](auto& up) { return binning_over_pool{up}; }}; }, why);
}

contender* make_async(char const** why) {
  return make_or_explain([] { return new rmm_async{}; }, why);
}

contender_kind const kinds[] = {
    {"rmm pool", "rmm", "pool_memory_resource over cuda_memory_resource, initial size 0", &make_pool},
    {"rmm arena", "rmm", "arena_memory_resource over cuda_memory_resource, default size (half the free memory)",
     &make_arena},
    {"rmm cuda_async", "rmm", "cuda_async_memory_resource (own cudaMemPool, release threshold: never)", &make_async},
    {"rmm binning", "rmm", "binning_memory_resource, bins 256 B..1 MiB, over pool_memory_resource (initial 0)",
     &make_binning},
};

}  // namespace

extern "C" __attribute__((visibility("default"))) int gpumem_compare_plugin_v1(int abi_version,
                                                                               contender_kind const** out, int* count,
                                                                               char const** why) {
  if (!gpumem_compare::plugin_abi_matches(abi_version, why)) return 1;
  *out = kinds;
  *count = static_cast<int>(sizeof kinds / sizeof kinds[0]);
  return 0;
}
