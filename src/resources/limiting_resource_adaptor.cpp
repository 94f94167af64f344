#include <gpumem/limiting_resource_adaptor.hpp>

#include <cstdint>
#include <string>

namespace gpumem {

limiting_resource_adaptor::limiting_resource_adaptor(device_memory_resource* upstream, std::size_t limit)
    : forwarding_resource_adaptor{upstream, "limiting_resource_adaptor"}, limit_{limit} {}

bool limiting_resource_adaptor::reserve(std::size_t need, std::size_t& used) noexcept {
  used = used_.load(std::memory_order_relaxed);
  do {
    if (need > limit_ || used > limit_ - need) return false;
  } while (!used_.compare_exchange_weak(used, used + need, std::memory_order_relaxed));
  return true;
}

void* limiting_resource_adaptor::do_allocate(std::size_t bytes, stream_ref stream) {
  if (bytes == 0) return get_upstream()->allocate(0, stream);
  // Saturate instead of wrapping for sizes near SIZE_MAX.
  std::size_t const need = bytes > SIZE_MAX - (allocation_alignment - 1) ? SIZE_MAX : charge(bytes);
  if (std::size_t used = 0; !reserve(need, used)) {
    throw out_of_memory{"gpumem: limit of " + std::to_string(limit_) + " bytes reached: " + std::to_string(used) +
                        " in use, " + std::to_string(bytes) + " requested (" + std::to_string(need) + " charged)"};
  }
  try {
    return get_upstream()->allocate(bytes, stream);
  } catch (...) {
    used_.fetch_sub(need, std::memory_order_relaxed);  // the reservation never became memory
    throw;
  }
}

bool limiting_resource_adaptor::try_charge(std::size_t bytes) noexcept {
  std::size_t used = 0;
  return reserve(bytes, used);
}

void limiting_resource_adaptor::discharge(std::size_t bytes) noexcept {
  used_.fetch_sub(bytes, std::memory_order_relaxed);
}

void limiting_resource_adaptor::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  get_upstream()->deallocate(p, bytes, stream);
  if (p != nullptr) used_.fetch_sub(charge(bytes), std::memory_order_relaxed);
}

}  // namespace gpumem
