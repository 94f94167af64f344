#include <gpumem/statistics_resource_adaptor.hpp>

namespace gpumem {

statistics_resource_adaptor::statistics_resource_adaptor(device_memory_resource* upstream)
    : forwarding_resource_adaptor{upstream, "statistics_resource_adaptor"} {}

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

}  // namespace gpumem
