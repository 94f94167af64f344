#include <gpumem/async_memory_resource.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/resource_errors.hpp>

#include <cstdint>
#include <limits>
#include <string>

namespace gpumem {
namespace {

void check(CUresult r, const char* call) { throw_on_error(r, call); }

std::uint64_t pool_attribute(CUmemoryPool pool, CUmemPool_attribute attr) noexcept {
  cuuint64_t v = 0;
  auto const& d = detail::driver();
  if (d.cuMemPoolGetAttribute == nullptr || d.cuMemPoolGetAttribute(pool, attr, &v) != CUDA_SUCCESS) return 0;
  return v;
}

}  // namespace

async_memory_resource::async_memory_resource(std::optional<std::size_t> release_threshold,
                                             std::optional<std::size_t> initial_pool_size) {
  check(detail::ensure_context(), "making a context current (cuDevicePrimaryCtxRetain)");
  auto const& d = detail::driver();
  if (d.cuMemPoolCreate == nullptr || d.cuMemAllocFromPoolAsync == nullptr) {
    throw cuda_error{CUDA_ERROR_NOT_SUPPORTED, "gpumem: the driver has no memory-pool API (cuMemPoolCreate)"};
  }
  CUdevice dev{};
  check(d.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  int supported = 0;
  check(d.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev), "cuDeviceGetAttribute");
  if (supported == 0) {
    throw cuda_error{CUDA_ERROR_NOT_SUPPORTED, "gpumem: device " + std::to_string(dev) + " has no memory pools"};
  }

  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = static_cast<int>(dev);
  check(d.cuMemPoolCreate(&pool_, &props), "cuMemPoolCreate");
  owned_ = true;

  // From here on a failure must not leak the pool: the destructor will not run.
  try {
    cuuint64_t threshold = release_threshold.value_or(std::numeric_limits<std::uint64_t>::max());
    check(d.cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), "cuMemPoolSetAttribute");
    if (initial_pool_size.value_or(0) > 0) {
      auto* const legacy = reinterpret_cast<CUstream>(legacy_stream_handle);
      CUdeviceptr p{};
      CUresult r = d.cuMemAllocFromPoolAsync(&p, *initial_pool_size, pool_, legacy);
      if (r != CUDA_SUCCESS) detail::throw_allocation_error(r, "cuMemAllocFromPoolAsync", *initial_pool_size);
      check(d.cuMemFreeAsync(p, legacy), "cuMemFreeAsync");
      check(d.cuStreamSynchronize(legacy), "cuStreamSynchronize");
    }
  } catch (...) {
    d.cuMemPoolDestroy(pool_);
    throw;
  }
}

async_memory_resource::async_memory_resource(CUmemoryPool pool) : pool_{pool}, owned_{false} {
  if (pool == nullptr) throw logic_error{"gpumem: async_memory_resource given a null CUmemoryPool"};
}

async_memory_resource::~async_memory_resource() {
  if (!owned_) return;
  if (CUresult r = detail::driver().cuMemPoolDestroy(pool_); r != CUDA_SUCCESS) {
    detail::report_free_failure("cuMemPoolDestroy", r, pool_);
  }
}

void* async_memory_resource::do_allocate(std::size_t bytes, stream_ref stream) {
  if (bytes == 0) return nullptr;
  if (CUresult r = detail::ensure_context(); r != CUDA_SUCCESS) {
    detail::throw_allocation_error(r, "cuMemAllocFromPoolAsync", bytes);
  }
  CUdeviceptr p{};
  if (CUresult r = detail::driver().cuMemAllocFromPoolAsync(&p, bytes, pool_, to_cu(stream)); r != CUDA_SUCCESS) {
    detail::throw_allocation_error(r, "cuMemAllocFromPoolAsync", bytes);
  }
  return reinterpret_cast<void*>(p);
}

void async_memory_resource::do_deallocate(void* p, std::size_t /*bytes*/, stream_ref stream) noexcept {
  if (p == nullptr) return;
  CUresult r = detail::ensure_context();
  if (r == CUDA_SUCCESS) r = detail::driver().cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(p), to_cu(stream));
  if (r != CUDA_SUCCESS) {
    failed_frees_.fetch_add(1, std::memory_order_relaxed);
    detail::report_free_failure("cuMemFreeAsync", r, p);
  }
}

std::size_t async_memory_resource::do_release() {
  auto const before = pool_attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  check(detail::driver().cuMemPoolTrimTo(pool_, 0), "cuMemPoolTrimTo");
  auto const after = pool_attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  return before > after ? static_cast<std::size_t>(before - after) : 0;
}

resource_info async_memory_resource::do_info() const {
  auto const reserved = static_cast<std::size_t>(pool_attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
  auto const used = static_cast<std::size_t>(pool_attribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
  return resource_info{.reserved_bytes = reserved,
                       .used_bytes = used,
                       .free_bytes = reserved > used ? reserved - used : 0,
                       .largest_free_block = 0};
}

bool async_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept {
  auto const* o = dynamic_cast<async_memory_resource const*>(&other);
  return o != nullptr && o->pool_ == pool_;
}

}  // namespace gpumem
