#include "synchronous_driver_calls.hpp"

namespace gpumem::detail {

void synchronous_free(void* p, std::size_t bytes, std::atomic<std::size_t>& used,
                      std::atomic<std::size_t>& failed) noexcept {
  if (p == nullptr) return;
  CUresult r = ensure_context();
  if (r == CUDA_SUCCESS) r = driver().cuMemFree(reinterpret_cast<CUdeviceptr>(p));
  if (r != CUDA_SUCCESS) {
    failed.fetch_add(1, std::memory_order_relaxed);
    report_free_failure("cuMemFree_v2", r, p);
    return;
  }
  used.fetch_sub(bytes, std::memory_order_relaxed);
}

resource_info synchronous_info(std::atomic<std::size_t> const& used) noexcept {
  auto const u = used.load(std::memory_order_relaxed);
  return resource_info{.reserved_bytes = u, .used_bytes = u, .free_bytes = 0, .largest_free_block = 0};
}

}  // namespace gpumem::detail
