#include <gpumem/detail/os_thread.hpp>

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace gpumem::detail {
namespace {

// A forked child runs only the thread that forked: forgetting that thread's id is
// enough to make every id the child reports its own.
void on_fork_child() noexcept { tl_thread_id = 0; }

}  // namespace

std::uint64_t read_thread_id() noexcept {
  // Registered before any id is cached, so no cached id can outlive a fork.
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, &on_fork_child); });
  tl_thread_id = static_cast<std::uint64_t>(::syscall(SYS_gettid));
  return tl_thread_id;
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

bool start_quiet_thread(pthread_t& thread, const char* name, void* (*body)(void*), void* arg) noexcept {
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);  // inherited by the new thread
  int const r = pthread_create(&thread, nullptr, body, arg);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (r != 0) return false;
  pthread_setname_np(thread, name);
  return true;
}

}  // namespace gpumem::detail
