#include <gpumem/detail/resource_errors.hpp>
#include <gpumem/diagnostics.hpp>
#include <gpumem/error.hpp>

#include <atomic>
#include <string>

namespace gpumem::detail {

void throw_allocation_error(CUresult r, const char* call, std::size_t bytes) {
  std::string msg = std::string{"gpumem: "} + call + "(" + std::to_string(bytes) + " bytes) failed: " + result_name(r);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) throw out_of_memory{std::move(msg)};
  throw cuda_error{r, msg};
}

namespace {
constexpr int max_free_reports = 16;
std::atomic<int> free_reports{0};
}  // namespace

void report_free_failure(const char* call, CUresult r, void const* p) noexcept {
  if (!log_enabled(log_level::error)) return;  // not counted against the limit while silenced
  int const k = free_reports.fetch_add(1, std::memory_order_relaxed);
  if (k > max_free_reports) return;
  if (k == max_free_reports) {
    log_message(log_level::error, "further failed frees are counted but not reported");
  } else {
    log_message(log_level::error, "%s(%p) failed: %s", call, p, result_name(r));
  }
}

}  // namespace gpumem::detail
