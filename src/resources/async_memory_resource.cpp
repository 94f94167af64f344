#include <gpumem/async_memory_resource.hpp>
#include <gpumem/call_context.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/resource_errors.hpp>
#include <gpumem/stream_tracker.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

namespace gpumem {
namespace {

void check(CUresult r, const char* call) { throw_on_error(r, call); }

std::uint64_t pool_attribute(CUmemoryPool pool, CUmemPool_attribute attr) noexcept {
  cuuint64_t v = 0;
  auto const& d = detail::driver();
  if (pool == nullptr || d.cuMemPoolGetAttribute == nullptr ||
      d.cuMemPoolGetAttribute(pool, attr, &v) != CUDA_SUCCESS) {
    return 0;
  }
  return v;
}

/// Pending synchronous frees are released once they pass this share of what the
/// pools reserve (and at least min_reclaim_bytes): barriers stay rare.
constexpr std::size_t reclaim_divisor = 32;
constexpr std::size_t min_reclaim_bytes = std::size_t{64} << 20;

CUstream legacy() noexcept { return reinterpret_cast<CUstream>(legacy_stream_handle); }

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
  device_ = static_cast<int>(dev);

  // From here on a failure must not leak the pools: the destructor will not run.
  try {
    cuuint64_t threshold = release_threshold.value_or(std::numeric_limits<std::uint64_t>::max());
    check(d.cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), "cuMemPoolSetAttribute");
    release_threshold_ = threshold;
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

CUmemoryPool async_memory_resource::sync_pool() {
  if (CUmemoryPool p = sync_pool_.load(std::memory_order_acquire)) return p;
  std::lock_guard lock{sync_pool_mutex_};
  if (CUmemoryPool p = sync_pool_.load(std::memory_order_relaxed)) return p;
  auto const& d = detail::driver();
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device_;
  CUmemoryPool p{};
  check(d.cuMemPoolCreate(&p, &props), "cuMemPoolCreate");
  try {
    cuuint64_t threshold = release_threshold_;
    check(d.cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), "cuMemPoolSetAttribute");
    // Reuse only frees whose completion the driver has observed: memory handed out
    // is then untouched by any queued work, whatever stream the program uses.
    int off = 0;
    int on = 1;
    check(d.cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, &off), "cuMemPoolSetAttribute");
    check(d.cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, &off), "cuMemPoolSetAttribute");
    check(d.cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &on), "cuMemPoolSetAttribute");
  } catch (...) {
    d.cuMemPoolDestroy(p);
    throw;
  }
  sync_pool_.store(p, std::memory_order_release);
  return p;
}

async_memory_resource::async_memory_resource(CUmemoryPool pool) : pool_{pool}, owned_{false} {
  if (pool == nullptr) throw logic_error{"gpumem: async_memory_resource given a null CUmemoryPool"};
  device_ = detail::current_device();
}

async_memory_resource::~async_memory_resource() {
  // Pending blocks go back (the barrier is refused only during a capture; then
  // they die with the pool).
  static_cast<void>(reclaim());
  if (!owned_) return;
  for (CUmemoryPool p : {pool_, sync_pool_.load(std::memory_order_acquire)}) {
    if (p == nullptr) continue;
    if (CUresult r = detail::driver().cuMemPoolDestroy(p); r != CUDA_SUCCESS) {
      detail::report_free_failure("cuMemPoolDestroy", r, p);
    }
  }
}

void* async_memory_resource::allocate_from(CUmemoryPool pool, std::size_t bytes, CUstream stream) {
  if (CUresult r = detail::ensure_context(); r != CUDA_SUCCESS) {
    detail::throw_allocation_error(r, "cuMemAllocFromPoolAsync", bytes);
  }
  CUdeviceptr p{};
  CUresult r = detail::driver().cuMemAllocFromPoolAsync(&p, bytes, pool, stream);
  if (r == CUDA_ERROR_OUT_OF_MEMORY && pending_bytes() != 0 && reclaim()) {
    r = detail::driver().cuMemAllocFromPoolAsync(&p, bytes, pool, stream);
  }
  if (r != CUDA_SUCCESS) detail::throw_allocation_error(r, "cuMemAllocFromPoolAsync", bytes);
  return reinterpret_cast<void*>(p);
}

void* async_memory_resource::do_allocate(std::size_t bytes, stream_ref stream) {
  if (bytes == 0) return nullptr;
  if (!current_call().synchronous) return allocate_from(pool_, bytes, to_cu(stream));
  if (owned_) return allocate_from(sync_pool(), bytes, legacy());
  // A pool we do not own keeps the driver's reuse rules: wait until every dependency
  // the driver inserted on the legacy stream has completed.
  void* p = allocate_from(pool_, bytes, legacy());
  if (CUresult r = detail::driver().cuStreamSynchronize(legacy()); r != CUDA_SUCCESS) {
    free_on(p, legacy());
    detail::throw_allocation_error(r, "cuStreamSynchronize", bytes);
  }
  return p;
}

void async_memory_resource::free_on(void* p, CUstream stream) noexcept {
  CUresult r = detail::ensure_context();
  if (r == CUDA_SUCCESS) r = detail::driver().cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(p), stream);
  if (r != CUDA_SUCCESS) {
    failed_frees_.fetch_add(1, std::memory_order_relaxed);
    detail::report_free_failure("cuMemFreeAsync", r, p);
  }
}

void async_memory_resource::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (p == nullptr) return;
  if (!current_call().synchronous) {
    free_on(p, to_cu(stream));
    return;
  }
  // Any stream's queued work may still use it: free it only behind a barrier.
  bool filed = false;
  {
    std::lock_guard lock{pending_mutex_};
    try {
      pending_.emplace_back(p, bytes);
      filed = true;
    } catch (...) {}
  }
  if (!filed) {
    // No host memory to keep it: the block stays allocated (leaked, never reused early).
    return;
  }
  auto const pending = pending_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (pending < min_reclaim_bytes) return;  // the usual case: no driver call
  auto const reserved = pool_attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) +
                        pool_attribute(sync_pool_.load(std::memory_order_acquire),
                                       CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  if (pending >= static_cast<std::size_t>(reserved / reclaim_divisor)) static_cast<void>(reclaim());
}

bool async_memory_resource::reclaim() noexcept {
  if (stream_tracker::capture_active()) return false;  // the barrier would refuse
  std::vector<std::pair<void*, std::size_t>> blocks;
  {
    std::lock_guard lock{pending_mutex_};
    blocks.swap(pending_);
  }
  if (blocks.empty()) return false;
  if (!stream_tracker::of(device_).barrier()) {
    std::lock_guard lock{pending_mutex_};
    try {
      pending_.insert(pending_.end(), blocks.begin(), blocks.end());
    } catch (...) {
      // No host memory: those blocks stay allocated (leaked, never reused early).
    }
    return false;
  }
  // The legacy stream now follows all work submitted before the barrier.
  std::size_t freed = 0;
  for (auto const& [p, bytes] : blocks) {
    free_on(p, legacy());
    freed += bytes;
  }
  pending_bytes_.fetch_sub(freed, std::memory_order_relaxed);
  return true;
}

std::size_t async_memory_resource::do_release() { return do_trim(0); }

std::size_t async_memory_resource::do_trim(std::size_t keep) {
  static_cast<void>(reclaim());
  std::size_t released = 0;
  for (CUmemoryPool p : {pool_, sync_pool_.load(std::memory_order_acquire)}) {
    if (p == nullptr) continue;
    auto const before = pool_attribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    check(detail::driver().cuMemPoolTrimTo(p, keep), "cuMemPoolTrimTo");
    auto const after = pool_attribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    released += before > after ? static_cast<std::size_t>(before - after) : 0;
  }
  return released;
}

resource_info async_memory_resource::do_info() const {
  CUmemoryPool const sync = sync_pool_.load(std::memory_order_acquire);
  auto const reserved = static_cast<std::size_t>(pool_attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) +
                                                 pool_attribute(sync, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
  auto const used_by_driver = static_cast<std::size_t>(pool_attribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) +
                                                       pool_attribute(sync, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
  // Pending blocks are still allocated in the driver's eyes but free in the program's.
  auto const pending = std::min(pending_bytes(), used_by_driver);
  auto const used = used_by_driver - pending;
  return resource_info{.reserved_bytes = reserved,
                       .used_bytes = used,
                       .free_bytes = reserved > used ? reserved - used : 0,
                       .largest_free_block = 0,
                       .pending_bytes = pending};
}

bool async_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept {
  auto const* o = dynamic_cast<async_memory_resource const*>(&other);
  return o != nullptr && o->pool_ == pool_;
}

}  // namespace gpumem
