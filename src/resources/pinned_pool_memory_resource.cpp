#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/pinned_pool_memory_resource.hpp>
#include <gpumem/stream_tracker.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace gpumem {

namespace {

constexpr std::size_t page_size = 4096;

// Growing while the GPU lags would let a host loop outrun a busy GPU without bound
// (CUDA's own free blocks instead): once this much more than the program uses waits
// for the GPU, a request waits for the fenced blocks before growing.
constexpr std::size_t waiting_slack = std::size_t{64} << 20;

enum class block_state : std::uint8_t { live, clean, pending, fenced };

struct block {
  std::size_t size = 0;  // the class size, as allocated upstream
  block_state state = block_state::live;
};

// The devices one fence made a barrier on.
using device_set = std::vector<int>;

// The devices of the process, read once: their number and handles never change.
struct device_list {
  int count = 0;
  std::array<CUdevice, stream_tracker::max_devices> handles{};
};
device_list const* devices() noexcept {
  static device_list const* const list = [] {
    auto const& d = detail::driver();
    auto* l = new (std::nothrow) device_list{};
    if (l == nullptr || d.cuDeviceGetCount(&l->count) != CUDA_SUCCESS) {
      delete l;
      return static_cast<device_list*>(nullptr);
    }
    l->count = std::min(l->count, stream_tracker::max_devices);
    for (int i = 0; i < l->count; ++i) {
      if (d.cuDeviceGet(&l->handles[static_cast<std::size_t>(i)], i) != CUDA_SUCCESS) l->count = i;
    }
    return l;
  }();
  return list;
}

// Makes a barrier on every device whose primary context is active: the GPU work
// that may touch a freed pinned block runs there (an inactive primary context has
// no work queued). False when a barrier is refused (a capture is active).
bool fence_all_devices(device_set& out) {
  auto const& d = detail::driver();
  if (d.init_result != CUDA_SUCCESS) return true;  // no driver: no GPU work to wait for
  device_list const* const list = devices();
  if (list == nullptr) return false;
  for (int i = 0; i < list->count; ++i) {
    unsigned flags = 0;
    int active = 0;
    if (d.cuDevicePrimaryCtxGetState(list->handles[static_cast<std::size_t>(i)], &flags, &active) != CUDA_SUCCESS)
      return false;
    if (active == 0) continue;
    if (!stream_tracker::of(i).barrier()) return false;
    out.push_back(i);
  }
  return true;
}

bool fence_complete(device_set const& devices, bool wait) {
  for (int dev : devices) {
    if (!stream_tracker::of(dev).last_barrier_complete(wait)) return false;
  }
  return true;
}

}  // namespace

struct pinned_pool_memory_resource::impl {
  impl(device_memory_resource* up, pinned_pool_options o) : upstream{up}, opts{o} {}
  device_memory_resource* upstream;
  pinned_pool_options opts;
  mutable std::mutex mutex;
  std::map<std::uintptr_t, block> blocks;            // every block held, by address
  std::multimap<std::size_t, std::uintptr_t> clean;  // class size -> clean block
  std::vector<std::uintptr_t> pending;               // freed, not yet fenced
  struct batch {
    device_set devices;
    std::vector<std::uintptr_t> members;
  };
  std::vector<batch> fenced;  // oldest first
  std::size_t held = 0;       // class bytes of every block
  std::size_t used = 0;       // class bytes handed out
  std::size_t waiting = 0;    // class bytes pending or fenced
  std::size_t peak_waiting = 0;
  std::size_t fences = 0;
  std::size_t waits = 0;

  // Caller holds `mutex` for all of these.
  void make_clean(std::uintptr_t p) {
    block& b = blocks.at(p);
    b.state = block_state::clean;
    waiting -= b.size;
    clean.emplace(b.size, p);
  }
  void promote_completed(bool wait) {
    std::size_t done = 0;
    // Barriers complete in order on each device: once one batch is found incomplete
    // the later ones are too.
    while (done < fenced.size() && fence_complete(fenced[done].devices, wait)) ++done;
    for (std::size_t i = 0; i < done; ++i) {
      for (auto p : fenced[i].members) make_clean(p);
    }
    fenced.erase(fenced.begin(), fenced.begin() + static_cast<std::ptrdiff_t>(done));
  }
  void fence_pending() {
    if (pending.empty()) return;
    batch b;
    if (!fence_all_devices(b.devices)) return;
    ++fences;
    for (auto p : pending) blocks.at(p).state = block_state::fenced;
    b.members = std::move(pending);
    pending.clear();
    fenced.push_back(std::move(b));
  }
  std::uintptr_t take_clean(std::size_t size) {
    auto it = clean.find(size);
    if (it == clean.end()) return 0;
    std::uintptr_t const p = it->second;
    clean.erase(it);
    blocks.at(p).state = block_state::live;
    used += size;
    return p;
  }
  // Clean blocks go back upstream (the lock is dropped around each upstream call,
  // the block first leaving every list). Returns the bytes given back.
  std::size_t release_clean(std::unique_lock<std::mutex>& lock, std::size_t need) {
    std::size_t freed = 0;
    while (!clean.empty() && (need == 0 || freed < need)) {
      auto it = std::prev(clean.end());  // largest first: fewest calls
      std::size_t const size = it->first;
      std::uintptr_t const p = it->second;
      clean.erase(it);
      blocks.erase(p);
      held -= size;
      freed += size;
      lock.unlock();
      upstream->deallocate(reinterpret_cast<void*>(p), size);
      lock.lock();
    }
    return freed;
  }
  [[nodiscard]] bool fits(std::size_t size) const {
    return !opts.maximum_size.has_value() || held + size <= *opts.maximum_size;
  }
};

pinned_pool_memory_resource::pinned_pool_memory_resource(device_memory_resource* upstream, pinned_pool_options opts)
    : impl_{std::make_unique<impl>(upstream, opts)} {
  if (upstream == nullptr) throw logic_error{"gpumem: pinned_pool_memory_resource needs an upstream"};
}

pinned_pool_memory_resource::~pinned_pool_memory_resource() {
  for (auto const& [p, b] : impl_->blocks) impl_->upstream->deallocate(reinterpret_cast<void*>(p), b.size);
}

device_memory_resource* pinned_pool_memory_resource::upstream() const noexcept { return impl_->upstream; }
pinned_pool_options const& pinned_pool_memory_resource::options() const noexcept { return impl_->opts; }

std::size_t pinned_pool_memory_resource::fence_count() const noexcept {
  std::lock_guard lock{impl_->mutex};
  return impl_->fences;
}

std::size_t pinned_pool_memory_resource::wait_count() const noexcept {
  std::lock_guard lock{impl_->mutex};
  return impl_->waits;
}

std::size_t pinned_pool_memory_resource::class_size(std::size_t bytes) noexcept {
  std::size_t const pages = (bytes + page_size - 1) / page_size;
  if (pages <= 4) return pages * page_size;
  // Four classes per power of two: the top bit and the next two, rounded up.
  int const shift = std::bit_width(pages) - 3;
  std::size_t const step = std::size_t{1} << shift;
  return (pages + step - 1) / step * step * page_size;
}

void* pinned_pool_memory_resource::do_allocate(std::size_t bytes, stream_ref /*stream: host memory*/) {
  if (bytes == 0) return nullptr;
  if (bytes > SIZE_MAX - (std::size_t{1} << 62U)) {
    throw out_of_memory{"gpumem: pinned pool: " + std::to_string(bytes) + " bytes cannot be allocated"};
  }
  auto& m = *impl_;
  std::size_t const size = class_size(bytes);
  std::unique_lock lock{m.mutex};
  if (std::uintptr_t p = m.take_clean(size)) return reinterpret_cast<void*>(p);
  m.promote_completed(false);
  if (std::uintptr_t p = m.take_clean(size)) return reinterpret_cast<void*>(p);
  m.fence_pending();
  m.promote_completed(false);
  if (std::uintptr_t p = m.take_clean(size)) return reinterpret_cast<void*>(p);

  bool waited = false;
  if (m.waiting > m.used + waiting_slack && !m.fenced.empty()) {
    ++m.waits;
    m.promote_completed(true);
    waited = true;
    if (std::uintptr_t p = m.take_clean(size)) return reinterpret_cast<void*>(p);
  }
  // Growth. Where the cap refuses it: first give back clean blocks of other
  // classes, then wait for the GPU to finish with the fenced ones.
  for (;;) {
    if (!m.fits(size)) {
      m.release_clean(lock, m.held + size - m.opts.maximum_size.value_or(0));
      if (std::uintptr_t p = m.take_clean(size)) return reinterpret_cast<void*>(p);
    }
    if (m.fits(size)) break;
    if (waited || m.fenced.empty()) {
      throw out_of_memory{"gpumem: pinned pool: " + std::to_string(bytes) + " bytes over its maximum of " +
                          std::to_string(m.opts.maximum_size.value_or(0)) + " (" + std::to_string(m.used) +
                          " bytes in use, " + std::to_string(m.waiting) + " waiting for the GPU)"};
    }
    ++m.waits;
    m.promote_completed(true);
    waited = true;
    if (std::uintptr_t p = m.take_clean(size)) return reinterpret_cast<void*>(p);
  }
  m.held += size;  // reserved before the lock drops, so concurrent growth respects the cap
  lock.unlock();
  void* p = nullptr;
  try {
    p = m.upstream->allocate(size);
  } catch (out_of_memory const&) {
    // The upstream is short: what the pool caches goes back, then one more try.
    lock.lock();
    m.held -= size;
    m.fence_pending();
    if (!m.fenced.empty()) {
      ++m.waits;
      m.promote_completed(true);
    }
    if (std::uintptr_t q = m.take_clean(size)) return reinterpret_cast<void*>(q);
    m.release_clean(lock, 0);
    m.held += size;
    lock.unlock();
    try {
      p = m.upstream->allocate(size);
    } catch (...) {
      lock.lock();
      m.held -= size;
      throw;
    }
  } catch (...) {
    lock.lock();
    m.held -= size;
    throw;
  }
  lock.lock();
  m.blocks.emplace(reinterpret_cast<std::uintptr_t>(p), block{size, block_state::live});
  m.used += size;
  return p;
}

// A foreign pointer or a wrong size is a caller's bug: debug builds abort on it;
// release builds ignore a foreign pointer and free by the pointer alone. A second
// free is ignored in both.
void pinned_pool_memory_resource::do_deallocate(void* p, [[maybe_unused]] std::size_t bytes,
                                                stream_ref /*stream*/) noexcept {
  if (p == nullptr) return;
  auto& m = *impl_;
  std::lock_guard lock{m.mutex};
  auto it = m.blocks.find(reinterpret_cast<std::uintptr_t>(p));
  GPUMEM_ASSERT(it != m.blocks.end(), "pinned pool: deallocate of a pointer the pool does not hold");
  if (it == m.blocks.end() || it->second.state != block_state::live) return;
  block& b = it->second;
  GPUMEM_ASSERT(class_size(bytes) == b.size, "pinned pool: deallocate with another size than the allocation's");
  m.used -= b.size;
  if (!m.opts.wait_for_gpu) {
    b.state = block_state::clean;
    m.clean.emplace(b.size, it->first);
    return;
  }
  b.state = block_state::pending;
  m.waiting += b.size;
  m.peak_waiting = std::max(m.peak_waiting, m.waiting);
  try {
    m.pending.push_back(it->first);
  } catch (std::bad_alloc const&) {
    return;  // the block stays in the table, held until release()
  }
  // Fence at once unless a fence is still in flight: the GPU then works through
  // it while the program runs, and the next request finds the block clean. At most
  // one fence in flight bounds the barriers to one per GPU round trip.
  m.promote_completed(false);
  if (m.fenced.empty()) m.fence_pending();
}

bool pinned_pool_memory_resource::do_deallocate_calls_driver() const noexcept { return impl_->opts.wait_for_gpu; }

std::size_t pinned_pool_memory_resource::do_release() {
  auto& m = *impl_;
  std::unique_lock lock{m.mutex};
  m.fence_pending();
  if (!m.fenced.empty()) m.promote_completed(true);
  return m.release_clean(lock, 0);
}

resource_info pinned_pool_memory_resource::do_info() const {
  auto const& m = *impl_;
  std::lock_guard lock{m.mutex};
  resource_info r;
  r.reserved_bytes = m.held;
  r.used_bytes = m.used;
  r.free_bytes = m.held - m.used;
  r.largest_free_block = m.clean.empty() ? 0 : std::prev(m.clean.end())->first;
  r.pending_bytes = m.waiting;
  r.peak_pending_bytes = m.peak_waiting;
  return r;
}

bool pinned_pool_memory_resource::do_owns(void const* p) const noexcept {
  auto const& m = *impl_;
  auto const a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock{m.mutex};
  auto it = m.blocks.upper_bound(a);
  if (it == m.blocks.begin()) return false;
  --it;
  return a < it->first + it->second.size;
}

}  // namespace gpumem
