#include "serve/live_streams.hpp"

#include <gpumem/detail/driver_api.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <unordered_map>

namespace gpumem::shim {
namespace {

struct registry {
  std::shared_mutex mutex;
  std::unordered_map<CUstream, stream_home> live;
  /// Bumped by every destroy: a per-thread "valid" answer is good until then.
  std::atomic<std::uint64_t> generation{1};
};

registry& streams() noexcept {
  // NOLINTNEXTLINE(bugprone-unhandled-exception-at-new): running out of memory here ends the process
  static auto* const r = new registry{};  // never destroyed: streams die during exit too
  return *r;
}

struct cached {
  CUstream stream{};
  std::uint64_t generation{};
  stream_home home{};
};
constexpr std::size_t cache_slots = 4;

}  // namespace

void stream_created(CUstream s, stream_home const& home) noexcept {
  if (s == nullptr) return;
  auto& r = streams();
  try {
    std::unique_lock lock{r.mutex};
    r.live.insert_or_assign(s, home);  // a handle the driver reuses gets its new home
  } catch (...) {
    // Out of host memory: the stream is checked with the driver on every call instead.
  }
}

void stream_gone(CUstream s) noexcept {
  if (s == nullptr) return;
  auto& r = streams();
  std::unique_lock lock{r.mutex};
  r.live.erase(s);
  r.generation.fetch_add(1, std::memory_order_release);  // invalidates every thread's cache
}

CUresult check_stream(CUstream s, stream_home* home) noexcept {
  if (home != nullptr) *home = stream_home{};
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return CUDA_SUCCESS;
  auto& r = streams();
  thread_local std::array<cached, cache_slots> cache{};
  auto const generation = r.generation.load(std::memory_order_acquire);
  for (auto const& c : cache) {
    if (c.stream == s && c.generation == generation) {
      if (home != nullptr) *home = c.home;
      return CUDA_SUCCESS;
    }
  }
  bool known = false;
  stream_home found{};
  {
    std::shared_lock lock{r.mutex};
    if (auto const it = r.live.find(s); it != r.live.end()) {
      known = true;
      found = it->second;
    }
  }
  if (!known) {
    // Not created through our hooks: the driver's verdict, not cached (we would not
    // see it destroyed).
    auto const& d = detail::driver();
    unsigned flags = 0;
    if (d.cuStreamGetFlags == nullptr) return CUDA_SUCCESS;
    return d.cuStreamGetFlags(s, &flags);
  }
  thread_local std::size_t next = 0;
  cache[next++ % cache_slots] = cached{s, generation, found};
  if (home != nullptr) *home = found;
  return CUDA_SUCCESS;
}

void reset_streams_after_fork() noexcept {
  auto& r = streams();
  new (&r.mutex) std::shared_mutex{};  // a parent thread may have held it at fork()
  r.live.clear();
  r.generation.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace gpumem::shim
