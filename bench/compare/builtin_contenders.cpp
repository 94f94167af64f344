#include "builtin_contenders.hpp"

#include <gpumem/binning_memory_resource.hpp>
#include <gpumem/call_context.hpp>
#include <gpumem/config.hpp>
#include <gpumem/cuda_memory_resource.hpp>
#include <gpumem/pool_memory_resource.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>
#include <gpumem/vmm_memory_resource.hpp>

#include <cuda_runtime_api.h>

#include <memory>

namespace gpumem_compare {
namespace {

gpumem::stream_ref ref(stream_t s) noexcept { return gpumem::stream_ref{s}; }

memory_usage usage_of(gpumem::statistics_resource_adaptor const& device_side) noexcept {
  auto const b = device_side.bytes();
  return {static_cast<std::uint64_t>(b.current), static_cast<std::uint64_t>(b.peak), true};
}

/// What gpumem_compare measures of a gpumem resource: `top` over a statistics adaptor
/// that counts what is reserved from cuMemAlloc (touched only when the pool grows).
class gpumem_resource_contender : public contender {
 public:
  void* allocate(std::size_t bytes, stream_t s) noexcept override {
    try {
      return top().allocate(bytes, ref(s));
    } catch (...) { return nullptr; }
  }
  void deallocate(void* p, std::size_t bytes, stream_t s) noexcept override { top().deallocate(p, bytes, ref(s)); }
  memory_usage usage() noexcept override { return usage_of(device_); }

 protected:
  virtual gpumem::device_memory_resource& top() noexcept = 0;
  gpumem::cuda_memory_resource cuda_;
  gpumem::statistics_resource_adaptor device_{&cuda_};
};

/// pool_memory_resource over cudaMalloc, growing on demand (initial 0): the pool
/// gpumem's default configuration builds, without the chain's adaptors.
class gpumem_pool final : public gpumem_resource_contender {
  gpumem::device_memory_resource& top() noexcept override { return pool_; }
  gpumem::pool_memory_resource pool_{&device_, gpumem::pool_options{std::size_t{0}, {}}};
};

/// binning_memory_resource with power-of-two bins 256 B..1 MiB over such a pool.
class gpumem_binning final : public gpumem_resource_contender {
  gpumem::device_memory_resource& top() noexcept override { return binning_; }
  gpumem::pool_memory_resource pool_{&device_, gpumem::pool_options{std::size_t{0}, {}}};
  gpumem::binning_memory_resource binning_{&pool_, std::int8_t{8}, std::int8_t{20}};
};

/// The pool over vmm_memory_resource: growths mapped one after another and joined
/// (the default chain's pool, without its adaptors).
class gpumem_vmm_pool final : public contender {
 public:
  void* allocate(std::size_t bytes, stream_t s) noexcept override {
    try {
      return pool_.allocate(bytes, ref(s));
    } catch (...) { return nullptr; }
  }
  void deallocate(void* p, std::size_t bytes, stream_t s) noexcept override { pool_.deallocate(p, bytes, ref(s)); }
  memory_usage usage() noexcept override { return usage_of(device_); }

 private:
  gpumem::vmm_memory_resource vmm_;
  gpumem::statistics_resource_adaptor device_{&vmm_};
  gpumem::pool_memory_resource pool_{&device_, gpumem::pool_options{std::size_t{0}, {}}};
};

/// What the shim builds with no configuration: build_chain over the embedded default
/// (statistics -> pool -> statistics -> vmm).
class gpumem_default_chain final : public contender {
 public:
  gpumem_default_chain()
      : chain_{gpumem::config::build_chain(
            gpumem::config::parse_toml(gpumem::config::default_toml(), "embedded default"), 0)} {}
  void* allocate(std::size_t bytes, stream_t s) noexcept override {
    try {
      return chain_->top().allocate(bytes, ref(s));
    } catch (...) { return nullptr; }
  }
  void deallocate(void* p, std::size_t bytes, stream_t s) noexcept override {
    chain_->top().deallocate(p, bytes, ref(s));
  }
  void* allocate_synchronous(std::size_t bytes, stream_t s) noexcept override {
    // As the shim serves cudaMalloc in safe mode: from memory no queued work can touch.
    gpumem::scoped_call_context const ctx{"cudaMalloc", 0, true};
    return allocate(bytes, s);
  }
  void deallocate_synchronous(void* p, std::size_t bytes, stream_t s) noexcept override {
    // As the shim serves cudaFree in safe mode: the block waits for a barrier.
    gpumem::scoped_call_context const ctx{"cudaFree", 0, true};
    chain_->top().deallocate(p, bytes, ref(s));
  }
  memory_usage usage() noexcept override { return usage_of(chain_->device_stats()); }

 private:
  std::unique_ptr<gpumem::config::resource_chain> chain_;
};

/// The driver's stream-ordered pool through the runtime: cudaMallocAsync/cudaFreeAsync
/// on the device's default pool, as a program gets it (release threshold 0: memory
/// goes back to the device at synchronizations).
class driver_pool final : public contender {
 public:
  driver_pool() {
    if (cudaDeviceGetDefaultMemPool(&pool_, 0) != cudaSuccess) pool_ = nullptr;
    trim();
    if (pool_ != nullptr) {
      cuuint64_t zero = 0;
      static_cast<void>(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &zero));
    }
  }
  ~driver_pool() override { trim(); }
  void* allocate(std::size_t bytes, stream_t s) noexcept override {
    void* p = nullptr;
    if (cudaMallocAsync(&p, bytes, s) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return nullptr;
    }
    return p;
  }
  void deallocate(void* p, std::size_t, stream_t s) noexcept override { static_cast<void>(cudaFreeAsync(p, s)); }
  memory_usage usage() noexcept override {
    memory_usage u;
    if (pool_ == nullptr) return u;
    cuuint64_t now = 0, high = 0;
    u.known = cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &now) == cudaSuccess &&
              cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &high) == cudaSuccess;
    u.reserved = now;
    u.peak_reserved = high;
    return u;
  }

 private:
  void trim() noexcept {
    static_cast<void>(cudaDeviceSynchronize());
    if (pool_ != nullptr) static_cast<void>(cudaMemPoolTrimTo(pool_, 0));
  }
  cudaMemPool_t pool_ = nullptr;
};

/// No caching at all: every pair is a cudaMalloc and a cudaFree (the reference).
class plain_cuda final : public contender {
 public:
  void* allocate(std::size_t bytes, stream_t) noexcept override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return nullptr;
    }
    return p;
  }
  void deallocate(void* p, std::size_t, stream_t) noexcept override { static_cast<void>(cudaFree(p)); }
};

template <class T>
contender* make(char const** why) {
  try {
    return new T{};
  } catch (std::exception const& e) {
    if (why != nullptr) {
      thread_local std::string msg;
      msg = e.what();
      *why = msg.c_str();
    }
    return nullptr;
  }
}

}  // namespace

std::vector<contender_kind> builtin_contender_kinds() {
  return {
      {"gpumem pool", "gpumem", "pool_memory_resource over cuda_memory_resource, initial size 0 (grows on demand)",
       &make<gpumem_pool>},
      {"gpumem binning", "gpumem", "binning_memory_resource, bins 256 B..1 MiB, over such a pool",
       &make<gpumem_binning>},
      {"gpumem pool over vmm", "gpumem",
       "pool_memory_resource over vmm_memory_resource (growths joined), initial size 0", &make<gpumem_vmm_pool>},
      {"gpumem default chain", "gpumem", "config::build_chain(embedded default): statistics, pool, statistics, vmm",
       &make<gpumem_default_chain>},
      {"cudaMallocAsync", "cuda", "cudaMallocAsync/cudaFreeAsync on the device's default memory pool",
       &make<driver_pool>},
      {reference_contender, "cuda", "cudaMalloc/cudaFree, no caching (the reference)", &make<plain_cuda>},
  };
}

}  // namespace gpumem_compare
