#include <gpumem/statistics_resource_adaptor.hpp>

#include <algorithm>
#include <iterator>

namespace gpumem {

namespace {

constexpr std::int64_t byte_step = std::int64_t{4} << 20;
constexpr std::int64_t allocation_step = 64;

}  // namespace

statistics_resource_adaptor::statistics_resource_adaptor(device_memory_resource* upstream, sharing s)
    : forwarding_resource_adaptor{upstream, "statistics_resource_adaptor"},
      bytes_{s == sharing::in_steps ? byte_step : 1},
      allocations_{s == sharing::in_steps ? allocation_step : 1} {}

void* statistics_resource_adaptor::do_allocate(std::size_t bytes, stream_ref stream) {
  void* p = nullptr;
  try {
    p = get_upstream()->allocate(bytes, stream);
  } catch (...) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    throw;
  }
  if (p != nullptr) {
    bytes_.add(static_cast<std::int64_t>(bytes));
    allocations_.add(1);
    totals_.add(total_bytes, bytes);
    totals_.add(total_allocations);
  }
  return p;
}

void statistics_resource_adaptor::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  get_upstream()->deallocate(p, bytes, stream);
  if (p == nullptr) return;
  std::size_t const released = any_released_.load(std::memory_order_acquire)
                                   ? take_released(static_cast<char*>(p), bytes)
                                   : 0;
  bytes_.add(-static_cast<std::int64_t>(bytes - std::min(bytes, released)));
  allocations_.add(-1);
  totals_.add(total_deallocations);
}

bool statistics_resource_adaptor::do_decommit(void* p, std::size_t bytes) noexcept {
  {
    std::lock_guard lock{released_mutex_};
    try {
      released_.emplace(static_cast<char*>(p), bytes);  // before the upstream: no failure after it
    } catch (...) {
      return false;  // no host memory to remember it: the pages stay mapped
    }
    any_released_.store(true, std::memory_order_release);
  }
  if (!get_upstream()->decommit(p, bytes)) {
    static_cast<void>(take_released(static_cast<char*>(p), bytes));
    return false;
  }
  bytes_.add(-static_cast<std::int64_t>(bytes));
  return true;
}

void statistics_resource_adaptor::do_commit(void* p, std::size_t bytes) {
  get_upstream()->commit(p, bytes);
  static_cast<void>(take_released(static_cast<char*>(p), bytes));
  bytes_.add(static_cast<std::int64_t>(bytes));
}

std::size_t statistics_resource_adaptor::take_released(char* p, std::size_t bytes) noexcept {
  std::lock_guard lock{released_mutex_};
  char* const end = p + bytes;
  std::size_t taken = 0;
  auto it = released_.upper_bound(p);
  if (it != released_.begin() && std::prev(it)->first + std::prev(it)->second > p) --it;
  while (it != released_.end() && it->first < end) {
    char* const start = it->first;
    char* const stop = start + it->second;
    it = released_.erase(it);
    // The parts outside [p, end) stay released. Each re-insert reuses the node just
    // freed in size, so it does not fail for want of memory in practice; if it did,
    // that part would be counted as held when its allocation goes (never below zero).
    try {
      if (start < p) released_.emplace(start, static_cast<std::size_t>(p - start));
      if (stop > end) it = released_.emplace(end, static_cast<std::size_t>(stop - end)).first;
    } catch (...) {}
    taken += static_cast<std::size_t>(std::min(stop, end) - std::max(start, p));
  }
  if (released_.empty()) any_released_.store(false, std::memory_order_relaxed);
  return taken;
}

}  // namespace gpumem
