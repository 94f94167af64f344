#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/managed_memory_resource.hpp>
#include <gpumem/per_flag_pools_memory_resource.hpp>
#include <gpumem/pinned_host_memory_resource.hpp>

namespace gpumem {

namespace {

bool valid_flags(host_accessible_kind kind, unsigned flags) noexcept {
  if (kind == host_accessible_kind::pinned) return (flags & ~pinned_host_flag_mask) == 0;
  return managed_attach_flag(flags);
}

std::unique_ptr<device_memory_resource> make_upstream(host_accessible_kind kind, unsigned flags) {
  if (kind == host_accessible_kind::pinned) return std::make_unique<pinned_host_memory_resource>(flags);
  return std::make_unique<managed_memory_resource>(flags);
}

}  // namespace

struct per_flag_pools_memory_resource::entry {
  std::unique_ptr<device_memory_resource> upstream;   // one CUDA allocation per block, freed alike
  std::unique_ptr<pinned_pool_memory_resource> pool;  // null when not pooled
  std::atomic<bool> forgotten{false};                 // its device's context is gone
  entry(host_accessible_kind kind, unsigned flags, pinned_pool_options const& opts, bool pooled)
      : upstream{make_upstream(kind, flags)} {
    if (pooled) pool = std::make_unique<pinned_pool_memory_resource>(upstream.get(), opts);
  }
  device_memory_resource& top() noexcept { return pool ? static_cast<device_memory_resource&>(*pool) : *upstream; }
};

per_flag_pools_memory_resource::per_flag_pools_memory_resource(host_accessible_kind kind, pinned_pool_options opts,
                                                               bool pooled)
    : kind_{kind}, opts_{opts}, pooled_{pooled} {}

template <class Fn>
void per_flag_pools_memory_resource::for_each(Fn&& fn) const {
  for (std::size_t i = 0, n = made_count_.load(std::memory_order_acquire); i < n; ++i) {
    entry* e = made_[i].load(std::memory_order_acquire);
    if (!e->forgotten.load(std::memory_order_acquire)) fn(*e);
  }
}

per_flag_pools_memory_resource::~per_flag_pools_memory_resource() {
  // A forgotten entry is leaked on purpose: destroying it would free its dead blocks.
  for_each([](entry& e) { delete &e; });
}

pinned_pool_memory_resource* per_flag_pools_memory_resource::pool(unsigned flags, int device) const noexcept {
  if (flags >= flag_sets || device < 0 || device >= max_devices) return nullptr;
  entry* e = entries_[(static_cast<std::size_t>(device) * flag_sets) + flags].load(std::memory_order_acquire);
  return e != nullptr ? e->pool.get() : nullptr;
}

device_memory_resource& per_flag_pools_memory_resource::serving(alloc_target target) {
  unsigned flags = target.flags;
  if (kind_ == host_accessible_kind::managed && flags == 0)
    flags = CU_MEM_ATTACH_GLOBAL;  // cudaMallocManaged's default
  if (flags >= flag_sets || !valid_flags(kind_, flags))
    throw cuda_error{CUDA_ERROR_INVALID_VALUE, "gpumem: flags the allocation does not take"};
  int const device = target.device >= 0 ? target.device : detail::current_device();  // makes a context current
  if (device < 0 || device >= max_devices) {
    CUresult const r = detail::ensure_context();
    throw cuda_error{r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_CONTEXT,
                     "gpumem: no context for host-accessible memory"};
  }
  auto& slot = entries_[(static_cast<std::size_t>(device) * flag_sets) + flags];
  if (entry* e = slot.load(std::memory_order_acquire)) [[likely]] { return e->top(); }
  std::lock_guard lock{make_mutex_};
  entry* e = slot.load(std::memory_order_acquire);
  if (e == nullptr) {
    e = new entry{kind_, flags, opts_, pooled_};
    // A forgotten pool's place first, so that device resets never overflow the list.
    std::size_t const n = made_count_.load(std::memory_order_relaxed);
    std::size_t i = 0;
    while (i < n && !made_[i].load(std::memory_order_relaxed)->forgotten.load(std::memory_order_relaxed)) ++i;
    made_[i].store(e, std::memory_order_release);
    if (i == n) made_count_.store(n + 1, std::memory_order_release);
    slot.store(e, std::memory_order_release);
  }
  return e->top();
}

void per_flag_pools_memory_resource::forget_device(int device) noexcept {
  if (device < 0 || device >= max_devices) return;
  forgot_.store(true, std::memory_order_release);
  std::lock_guard lock{make_mutex_};
  for (unsigned f = 0; f < flag_sets; ++f) {
    if (entry* e = entries_[(static_cast<std::size_t>(device) * flag_sets) + f].exchange(nullptr,
                                                                                         std::memory_order_acq_rel))
      e->forgotten.store(true, std::memory_order_release);
  }
}

device_memory_resource* per_flag_pools_memory_resource::holder(void const* p) const noexcept {
  device_memory_resource* found = nullptr;
  for_each([&](entry& e) {
    if (found == nullptr && e.pool && e.pool->owns(p)) found = e.pool.get();
  });
  return found;
}

void* per_flag_pools_memory_resource::do_allocate(std::size_t bytes, stream_ref stream) {
  if (bytes == 0) return nullptr;
  return serving(current_alloc_target()).allocate(bytes, stream);
}

void per_flag_pools_memory_resource::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (p == nullptr) return;
  if (!pooled_) {
    // Unpooled: each flag set's upstream frees alike (cuMemFreeHost, cuMemFree).
    bool done = false;
    for_each([&](entry& e) {
      if (!done) e.upstream->deallocate(p, bytes, stream);
      done = true;
    });
    return;
  }
  device_memory_resource* const r = holder(p);
  GPUMEM_ASSERT(r != nullptr || forgot_.load(std::memory_order_acquire),
                "per-flag pools: deallocate of a pointer no pool holds");
  if (r != nullptr) r->deallocate(p, bytes, stream);
}

std::size_t per_flag_pools_memory_resource::do_release() {
  std::size_t n = 0;
  for_each([&](entry& e) { n += e.top().release(); });
  return n;
}

resource_info per_flag_pools_memory_resource::do_info() const {
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

bool per_flag_pools_memory_resource::do_owns(void const* p) const noexcept { return holder(p) != nullptr; }

std::size_t per_flag_pools_memory_resource::fence_count() const noexcept {
  std::size_t n = 0;
  for_each([&](entry& e) { n += e.pool ? e.pool->fence_count() : 0; });
  return n;
}

std::size_t per_flag_pools_memory_resource::wait_count() const noexcept {
  std::size_t n = 0;
  for_each([&](entry& e) { n += e.pool ? e.pool->wait_count() : 0; });
  return n;
}

}  // namespace gpumem
