#include <gpumem/detail/os_thread.hpp>

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace gpumem::detail {
namespace {

// Bumped in every forked child, so thread-local caches taken in the parent are
// recognised as stale (the child's thread has a new id).
std::atomic<std::uint32_t> fork_generation{1};

void on_fork_child() noexcept { fork_generation.fetch_add(1, std::memory_order_relaxed); }

std::uint32_t current_generation() noexcept {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, &on_fork_child); });
  return fork_generation.load(std::memory_order_relaxed);
}

}  // namespace

std::uint64_t os_thread_id() noexcept {
  struct cache {
    std::uint32_t generation = 0;
    std::uint64_t tid = 0;
  };
  static thread_local cache c;
  auto const g = current_generation();
  if (c.generation != g) {
    c.tid = static_cast<std::uint64_t>(::syscall(SYS_gettid));
    c.generation = g;
  }
  return c.tid;
}

std::int32_t local_utc_offset(std::int64_t time_ns) noexcept {
  // Packed (hour << 20 | (offset + 2^19)) in one atomic, so readers never see an
  // hour paired with another hour's offset. Offsets are within +-14 h < 2^19 s.
  static std::atomic<std::int64_t> cached{-1};
  constexpr std::int64_t bias = std::int64_t{1} << 19;
  std::int64_t const sec = time_ns >= 0 ? time_ns / 1'000'000'000 : (time_ns + 1) / 1'000'000'000 - 1;
  std::int64_t const hour = sec / 3600;
  std::int64_t const c = cached.load(std::memory_order_relaxed);
  if (c >= 0 && (c >> 20) == hour) return static_cast<std::int32_t>((c & ((bias << 1) - 1)) - bias);
  time_t const t = static_cast<time_t>(sec);
  tm local{};
  std::int64_t offset = 0;
  if (localtime_r(&t, &local) != nullptr) offset = local.tm_gmtoff;
  if (hour >= 0) cached.store((hour << 20) | (offset + bias), std::memory_order_relaxed);
  return static_cast<std::int32_t>(offset);
}

}  // namespace gpumem::detail
