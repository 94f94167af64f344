// PyTorch's CUDA caching allocator as a contender: a plugin built on the GPU machine
// against the installed torch (scripts/bench-compare builds it first thing there), through
// the allocator's C++ entry points c10::cuda::CUDACachingAllocator::raw_alloc_with_stream
// and raw_delete — what every tensor allocation reaches.
//
// The caching allocator is one per process: a "fresh" contender empties its cache and
// resets its peak counters, and destroying one empties the cache again, so each
// measurement point starts from an empty device like the others.
#include "contender.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <cuda_runtime_api.h>

#include <exception>
#include <string>

namespace {

using gpumem_compare::contender;
using gpumem_compare::contender_kind;
using gpumem_compare::memory_usage;
using gpumem_compare::stream_t;

namespace alloc = c10::cuda::CUDACachingAllocator;

constexpr std::size_t aggregate = 0;  // StatType::AGGREGATE: all pools together

class torch_caching final : public contender {
 public:
  torch_caching() {
    if (!alloc::get()->initialized()) alloc::init(static_cast<int>(c10::cuda::device_count()));
    static_cast<void>(cudaDeviceSynchronize());
    alloc::emptyCache();
    alloc::resetPeakStats(0);
  }
  ~torch_caching() override {
    static_cast<void>(cudaDeviceSynchronize());
    try {
      alloc::emptyCache();
    } catch (...) {}
  }
  void* allocate(std::size_t bytes, stream_t s) noexcept override {
    try {
      return alloc::raw_alloc_with_stream(bytes, static_cast<cudaStream_t>(s));
    } catch (...) {
      return nullptr;  // c10::OutOfMemoryError and any other c10::Error
    }
  }
  // The block remembers its stream; raw_delete frees it in that stream's order.
  void deallocate(void* p, std::size_t, stream_t) noexcept override {
    try {
      alloc::raw_delete(p);
    } catch (...) {}
  }
  memory_usage usage() noexcept override {
    try {
      auto const stats = alloc::getDeviceStats(0);
      auto const& r = stats.reserved_bytes[aggregate];
      return {static_cast<std::uint64_t>(r.current), static_cast<std::uint64_t>(r.peak), true};
    } catch (...) { return {}; }
  }
};

contender* make_torch(char const** why) {
  return gpumem_compare::make_or_explain([] { return new torch_caching{}; }, why);
}

contender_kind const kinds[] = {
    {"torch caching", "torch",
     "PyTorch's CUDA caching allocator (raw_alloc_with_stream / raw_delete), default settings", &make_torch},
};

}  // namespace

extern "C" __attribute__((visibility("default"))) int gpumem_compare_plugin_v1(int abi_version,
                                                                               contender_kind const** out, int* count,
                                                                               char const** why) {
  using gpumem_compare::plugin_failure;
  if (!gpumem_compare::plugin_abi_matches(abi_version, why)) return 1;
  try {
    if (alloc::get() == nullptr) return plugin_failure(why, "c10's CUDA allocator is not set up");
    std::string const name = alloc::name();
    if (name != "native") {  // PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync would measure the driver pool
      return plugin_failure(why, "PyTorch's allocator backend is '" + name + "', not the caching allocator ('native')");
    }
  } catch (std::exception const& e) { return plugin_failure(why, e.what()); }
  *out = kinds;
  *count = 1;
  return 0;
}
