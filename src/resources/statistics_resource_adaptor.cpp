#include <gpumem/statistics_resource_adaptor.hpp>

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
  bytes_.add(-static_cast<std::int64_t>(bytes));
  allocations_.add(-1);
  totals_.add(total_deallocations);
}

bool statistics_resource_adaptor::do_decommit(void* p, std::size_t bytes) noexcept {
  if (!get_upstream()->decommit(p, bytes)) return false;
  bytes_.add(-static_cast<std::int64_t>(bytes));
  return true;
}

void statistics_resource_adaptor::do_commit(void* p, std::size_t bytes) {
  get_upstream()->commit(p, bytes);
  bytes_.add(static_cast<std::int64_t>(bytes));
}

}  // namespace gpumem
