#include <gpumem/detail/resource_errors.hpp>
#include <gpumem/error.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
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

// Appends s to buf at *n, bounded; no allocation.
void put(char* buf, std::size_t cap, std::size_t* n, const char* s) noexcept {
  while (*s != '\0' && *n < cap) buf[(*n)++] = *s++;
}
void put_hex(char* buf, std::size_t cap, std::size_t* n, std::uintptr_t v) noexcept {
  char tmp[2 + 2 * sizeof v];
  int i = static_cast<int>(sizeof tmp);
  do {
    tmp[--i] = "0123456789abcdef"[v & 0xf];
    v >>= 4;
  } while (v != 0);
  tmp[--i] = 'x';
  tmp[--i] = '0';
  while (i < static_cast<int>(sizeof tmp) && *n < cap) buf[(*n)++] = tmp[i++];
}
}  // namespace

void report_free_failure(const char* call, CUresult r, void const* p) noexcept {
  int const k = free_reports.fetch_add(1, std::memory_order_relaxed);
  if (k > max_free_reports) return;
  char buf[256];
  std::size_t n = 0;
  if (k == max_free_reports) {
    put(buf, sizeof buf, &n, "gpumem: further failed frees are counted but not reported\n");
  } else {
    put(buf, sizeof buf, &n, "gpumem: ");
    put(buf, sizeof buf, &n, call);
    put(buf, sizeof buf, &n, "(");
    put_hex(buf, sizeof buf, &n, reinterpret_cast<std::uintptr_t>(p));
    put(buf, sizeof buf, &n, ") failed: ");
    put(buf, sizeof buf, &n, result_name(r));
    put(buf, sizeof buf, &n, "\n");
  }
  // One write(2): lines from several threads do not interleave.
  [[maybe_unused]] auto const w = ::write(STDERR_FILENO, buf, n);
}

}  // namespace gpumem::detail
