#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/pinned_host_memory_resource.hpp>
#include <gpumem/pinned_pools_memory_resource.hpp>

namespace gpumem {

struct pinned_pools_memory_resource::entry {
  pinned_host_memory_resource host;
  std::unique_ptr<pinned_pool_memory_resource> pool;  // null when not pooled
  entry(unsigned flags, pinned_pool_options const& opts, bool pooled) : host{flags} {
    if (pooled) pool = std::make_unique<pinned_pool_memory_resource>(&host, opts);
  }
  device_memory_resource& top() noexcept {
    return pool ? static_cast<device_memory_resource&>(*pool) : static_cast<device_memory_resource&>(host);
  }
};

pinned_pools_memory_resource::pinned_pools_memory_resource(pinned_pool_options opts, bool pooled)
    : opts_{opts}, pooled_{pooled} {}

pinned_pools_memory_resource::~pinned_pools_memory_resource() {
  for (auto& e : entries_) delete e.load(std::memory_order_acquire);
}

template <class Fn>
void pinned_pools_memory_resource::for_each(Fn&& fn) const {
  for (auto const& slot : entries_) {
    if (entry* e = slot.load(std::memory_order_acquire)) fn(*e);
  }
}

pinned_pool_memory_resource* pinned_pools_memory_resource::pool(unsigned flags, int device) const noexcept {
  if (flags >= flag_sets || device < 0 || device >= max_devices) return nullptr;
  entry* e = entries_[(static_cast<std::size_t>(device) * flag_sets) + flags].load(std::memory_order_acquire);
  return e != nullptr ? e->pool.get() : nullptr;
}

device_memory_resource& pinned_pools_memory_resource::serving(unsigned flags) {
  if ((flags & ~pinned_host_flag_mask) != 0)
    throw cuda_error{CUDA_ERROR_INVALID_VALUE, "gpumem: unknown cuMemHostAlloc flags"};
  if (CUresult r = detail::ensure_context(); r != CUDA_SUCCESS)
    throw cuda_error{r, "gpumem: no context for pinned memory"};
  int const device = detail::current_device();
  if (device < 0 || device >= max_devices)
    throw cuda_error{CUDA_ERROR_INVALID_CONTEXT, "gpumem: no device for pinned memory"};
  auto& slot = entries_[(static_cast<std::size_t>(device) * flag_sets) + flags];
  if (entry* e = slot.load(std::memory_order_acquire)) [[likely]] { return e->top(); }
  std::lock_guard lock{make_mutex_};
  entry* e = slot.load(std::memory_order_acquire);
  if (e == nullptr) {
    e = new entry{flags, opts_, pooled_};
    slot.store(e, std::memory_order_release);
  }
  return e->top();
}

device_memory_resource* pinned_pools_memory_resource::holder(void const* p) const noexcept {
  device_memory_resource* found = nullptr;
  for_each([&](entry& e) {
    if (found == nullptr && e.pool && e.pool->owns(p)) found = e.pool.get();
  });
  return found;
}

void* pinned_pools_memory_resource::do_allocate(std::size_t bytes, stream_ref stream) {
  if (bytes == 0) return nullptr;
  return serving(pinned_alloc_flags()).allocate(bytes, stream);
}

void pinned_pools_memory_resource::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (p == nullptr) return;
  if (!pooled_) {
    // Unpooled: each flag set's resource frees with cuMemFreeHost alike.
    for (auto const& slot : entries_) {
      if (entry* e = slot.load(std::memory_order_acquire)) {
        e->host.deallocate(p, bytes, stream);
        return;
      }
    }
    return;
  }
  device_memory_resource* const r = holder(p);
  GPUMEM_ASSERT(r != nullptr, "pinned pools: deallocate of a pointer no pool holds");
  if (r != nullptr) r->deallocate(p, bytes, stream);
}

std::size_t pinned_pools_memory_resource::do_release() {
  std::size_t n = 0;
  for_each([&](entry& e) { n += e.top().release(); });
  return n;
}

resource_info pinned_pools_memory_resource::do_info() const {
  resource_info sum;
  for_each([&](entry& e) {
    resource_info const i = e.top().info();
    sum.reserved_bytes += i.reserved_bytes;
    sum.used_bytes += i.used_bytes;
    sum.free_bytes += i.free_bytes;
    sum.largest_free_block = std::max(sum.largest_free_block, i.largest_free_block);
    sum.pending_bytes += i.pending_bytes;
    sum.peak_pending_bytes += i.peak_pending_bytes;
  });
  return sum;
}

bool pinned_pools_memory_resource::do_owns(void const* p) const noexcept { return holder(p) != nullptr; }

std::size_t pinned_pools_memory_resource::fence_count() const noexcept {
  std::size_t n = 0;
  for_each([&](entry& e) { n += e.pool ? e.pool->fence_count() : 0; });
  return n;
}

std::size_t pinned_pools_memory_resource::wait_count() const noexcept {
  std::size_t n = 0;
  for_each([&](entry& e) { n += e.pool ? e.pool->wait_count() : 0; });
  return n;
}

}  // namespace gpumem
