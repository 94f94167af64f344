// csv_log_writer: append-only, crash-durable CSV through a MAP_SHARED file mapping.
//
// Layout: the file is mapped in fixed 256 MiB windows of address space (mapping
// past the end of a file is allowed; only touching those pages is not), so growing
// the file never moves a window and writers never wait on a remap. The write
// offset, the backed size and the growth lock live in a MAP_SHARED anonymous page:
// a forked child shares them, so parent and child append to one file safely.

#include <gpumem/csv_log_writer.hpp>
#include <gpumem/error.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

namespace gpumem {

struct csv_log_writer::shared_state {
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "needs address-free atomics across fork");
  /// Bytes reserved; bit 63 set once the owner closed the log (later rows drop).
  std::atomic<std::uint64_t> tail{0};
  /// Bytes the file is known to be backed for (fallocate'd).
  std::atomic<std::uint64_t> capacity{0};
  std::atomic<std::uint64_t> dropped{0};
  pthread_mutex_t grow;  ///< process-shared, robust: a writer killed mid-growth does not wedge the others
};

namespace {

constexpr std::uint64_t closed_bit = std::uint64_t{1} << 63;
constexpr std::uint64_t min_chunk = std::uint64_t{1} << 20;   // first growth: 1 MiB
constexpr std::uint64_t max_chunk = std::uint64_t{64} << 20;  // then by the file's size, up to 64 MiB
constexpr std::uint64_t page_bytes = 4096;  // populate granularity (larger pages are multiples)

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and the helper stops
#endif

[[noreturn]] void throw_open_error(std::string const& path, const char* what, int err) {
  throw logic_error{"gpumem: cannot " + std::string{what} + " log file '" + path + "': " + std::strerror(err)};
}

class grow_lock {
 public:
  explicit grow_lock(pthread_mutex_t* m) noexcept : m_{m} {
    if (pthread_mutex_lock(m_) == EOWNERDEAD) pthread_mutex_consistent(m_);  // holder died; state is re-derived
  }
  ~grow_lock() { pthread_mutex_unlock(m_); }
  grow_lock(grow_lock const&) = delete;
  grow_lock& operator=(grow_lock const&) = delete;

 private:
  pthread_mutex_t* m_;
};

// Registry of open writers for the atexit truncation (plain globals: usable
// during exit, whatever the order of static destructors).
pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
csv_log_writer* registry_head = nullptr;
pthread_once_t atexit_once = PTHREAD_ONCE_INIT;

}  // namespace

csv_log_writer::csv_log_writer(std::string path) : path_{std::move(path)}, owner_pid_{::getpid()} {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_open_error(path_, "open", errno);

  void* page = ::mmap(nullptr, sizeof(shared_state), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    int const err = errno;
    ::close(fd_);
    throw_open_error(path_, "map state for", err);
  }
  shared_ = new (page) shared_state{};
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&shared_->grow, &attr);
  pthread_mutexattr_destroy(&attr);

  if (!ensure_mapped(csv_log_header.size())) {
    int const err = errno;
    truncate_and_unmap(true);
    throw_open_error(path_, "extend", err);
  }
  append(csv_log_header.data(), csv_log_header.size());
  start_prefault();

  pthread_once(&atexit_once, [] { std::atexit(&csv_log_writer::truncate_all_at_exit); });
  pthread_mutex_lock(&registry_mutex);
  next_live_ = registry_head;
  if (registry_head != nullptr) registry_head->prev_live_ = this;
  registry_head = this;
  pthread_mutex_unlock(&registry_mutex);
}

csv_log_writer::~csv_log_writer() {
  pthread_mutex_lock(&registry_mutex);
  if (prev_live_ != nullptr) prev_live_->next_live_ = next_live_;
  else if (registry_head == this) registry_head = next_live_;
  if (next_live_ != nullptr) next_live_->prev_live_ = prev_live_;
  pthread_mutex_unlock(&registry_mutex);
  close();
}

void csv_log_writer::truncate_all_at_exit() noexcept {
  pthread_mutex_lock(&registry_mutex);
  for (auto* w = registry_head; w != nullptr; w = w->next_live_) {
    // Keep the mappings: a thread still running at exit may be mid-copy.
    w->prefault_on_.store(false, std::memory_order_relaxed);
    w->truncate_and_unmap(false);  // the helper sees the closed log and ends
  }
  pthread_mutex_unlock(&registry_mutex);
}

void csv_log_writer::write(log_row const& row) noexcept {
  char buf[max_row_bytes];
  append(buf, format_row(buf, row));
}

void csv_log_writer::append(char const* data, std::size_t len) noexcept {
  if (shared_ == nullptr || len == 0) return;
  auto const off = shared_->tail.fetch_add(len, std::memory_order_relaxed);
  if ((off & closed_bit) != 0) {
    shared_->dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto const end = off + len;
  if ((end - 1) / window_bytes >= max_windows) {  // past the largest log we can map
    shared_->dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  bool const mapped = end <= shared_->capacity.load(std::memory_order_acquire) &&
                      windows_[off / window_bytes].load(std::memory_order_acquire) != nullptr &&
                      windows_[(end - 1) / window_bytes].load(std::memory_order_acquire) != nullptr;
  if (!mapped && !ensure_mapped(end)) {
    shared_->dropped.fetch_add(1, std::memory_order_relaxed);  // the bytes stay NUL: readers skip them
    return;
  }
  copy_out(off, data, len);
  // Crossed a grain boundary: the helper populates the next pages before we get there.
  if (((off ^ end) >> prefault_grain_shift) != 0 && prefault_on_.load(std::memory_order_relaxed)) {
    prefault_wake_.fetch_add(1, std::memory_order_release);
    prefault_wake_.notify_one();
  }
}

void csv_log_writer::start_prefault() noexcept {
  // All signals blocked in the helper: the program's handlers never run on it.
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  prefault_on_.store(true, std::memory_order_relaxed);
  int const r = pthread_create(
      &prefault_thread_, nullptr,
      [](void* self) -> void* {
        static_cast<csv_log_writer*>(self)->prefault_loop();
        return nullptr;
      },
      this);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  prefault_started_ = r == 0;
  if (r != 0) {
    prefault_on_.store(false, std::memory_order_relaxed);  // writers fault pages in themselves
    return;
  }
  pthread_setname_np(prefault_thread_, "gpumem-log");
}

void csv_log_writer::stop_prefault() noexcept {
  prefault_on_.store(false, std::memory_order_relaxed);
  if (!prefault_started_) return;
  prefault_started_ = false;
  // In a forked child the thread does not exist (joining would wait forever).
  if (::getpid() != owner_pid_) return;
  prefault_stop_.store(true, std::memory_order_relaxed);
  prefault_wake_.fetch_add(1, std::memory_order_release);
  prefault_wake_.notify_all();
  pthread_join(prefault_thread_, nullptr);
}

void csv_log_writer::prefault_loop() noexcept {
  std::uint64_t done = 0;  // [0, done) populated in this process
  while (!prefault_stop_.load(std::memory_order_relaxed)) {
    auto const seen = prefault_wake_.load(std::memory_order_acquire);
    auto const tail = shared_->tail.load(std::memory_order_relaxed);
    if ((tail & closed_bit) != 0) break;
    auto const want = tail + prefault_ahead;
    if (want > done) {
      // Grow the file ahead too (under the growth lock, as writers would).
      if (want > shared_->capacity.load(std::memory_order_acquire) && !ensure_mapped(want)) {
        break;  // disk full: writers count their dropped rows
      }
      auto const from = std::max(done, tail / page_bytes * page_bytes);
      auto const to = std::min(want, shared_->capacity.load(std::memory_order_acquire)) / page_bytes * page_bytes;
      if (from < to) {
        if (!populate(from, to)) break;
        done = to;
      }
    }
    prefault_wake_.wait(seen, std::memory_order_acquire);
  }
  prefault_on_.store(false, std::memory_order_relaxed);
}

bool csv_log_writer::populate(std::uint64_t from, std::uint64_t to) noexcept {
  while (from < to) {
    auto const k = from / window_bytes;
    auto const in = from % window_bytes;
    auto const n = std::min<std::uint64_t>(to - from, window_bytes - in);
    char* w = windows_[k].load(std::memory_order_acquire);
    if (w == nullptr) {  // the file was grown by another process (a forked child): map it here
      if (!ensure_mapped(from + n)) return false;
      w = windows_[k].load(std::memory_order_acquire);
    }
    // Write-faults the pages in without storing to them: rows already copied
    // there are kept. EFAULT: the file was truncated under us (closed).
    if (::madvise(w + in, n, MADV_POPULATE_WRITE) != 0 && errno != EINTR && errno != EAGAIN) return false;
    from += n;
  }
  return true;
}

void csv_log_writer::copy_out(std::uint64_t offset, char const* data, std::size_t len) noexcept {
  while (len != 0) {
    auto const k = offset / window_bytes;
    auto const in = offset % window_bytes;
    auto const n = std::min<std::uint64_t>(len, window_bytes - in);
    std::memcpy(windows_[k].load(std::memory_order_acquire) + in, data, n);
    data += n;
    offset += n;
    len -= n;
  }
}

bool csv_log_writer::ensure_mapped(std::uint64_t end) noexcept {
  if (end == 0 || (end - 1) / window_bytes >= max_windows) {
    errno = EFBIG;
    return false;
  }
  grow_lock lock{&shared_->grow};
  auto const old_cap = shared_->capacity.load(std::memory_order_relaxed);
  auto cap = old_cap;
  if (end > cap) {
    auto const tail = shared_->tail.load(std::memory_order_relaxed);
    std::uint64_t target = 0;
    if ((tail & closed_bit) != 0) {
      target = tail & ~closed_bit;  // closed: back exactly the rows reserved before the close
    } else {
      auto const chunk = std::clamp(cap, min_chunk, max_chunk);
      target = std::max((end + chunk - 1) / chunk * chunk, cap + chunk);
    }
    // fallocate, not just ftruncate: blocks are reserved now, so a full disk fails
    // here (the row is dropped) instead of as SIGBUS on a later store.
    int const r = ::posix_fallocate(fd_, static_cast<off_t>(cap), static_cast<off_t>(target - cap));
    if (r == EOPNOTSUPP || r == ENOSYS || r == EINVAL) {
      if (::ftruncate(fd_, static_cast<off_t>(target)) != 0) return false;
    } else if (r != 0) {
      errno = r;
      return false;
    }
    cap = target;
  }
  // Map every window of the backed file this process has not mapped yet.
  for (std::uint64_t k = 0; k * window_bytes < std::max(cap, end) && k < max_windows; ++k) {
    if (windows_[k].load(std::memory_order_relaxed) != nullptr) continue;
    void* w = ::mmap(nullptr, window_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                     static_cast<off_t>(k * window_bytes));
    if (w == MAP_FAILED) return false;
    windows_[k].store(static_cast<char*>(w), std::memory_order_release);
  }
  // Pages are faulted in by the writers as they go (about 1 us per 4 KiB, i.e.
  // per ~40 rows); pre-faulting a whole chunk here was no faster on the H200
  // host and made the one writer that grows wait tens of milliseconds.
  if (cap > old_cap) shared_->capacity.store(cap, std::memory_order_release);  // only now may writers skip the lock
  return true;
}

void csv_log_writer::flush() noexcept {
  if (shared_ == nullptr) return;
  auto const written = bytes_written();
  for (std::size_t k = 0; k < max_windows && k * window_bytes < written; ++k) {
    auto* w = windows_[k].load(std::memory_order_acquire);
    if (w == nullptr) continue;
    ::msync(w, std::min<std::uint64_t>(window_bytes, written - k * window_bytes), MS_ASYNC);
  }
}

void csv_log_writer::close() noexcept {
  stop_prefault();  // before the windows it populates go away
  truncate_and_unmap(true);
}

void csv_log_writer::truncate_and_unmap(bool unmap) noexcept {
  if (shared_ == nullptr) return;
  // Only the opening process closes the shared log: a forked child that closes
  // its copy must not cut off its parent's rows.
  if (::getpid() == owner_pid_) {
    auto const written = shared_->tail.fetch_or(closed_bit, std::memory_order_relaxed) & ~closed_bit;
    grow_lock lock{&shared_->grow};
    if (::ftruncate(fd_, static_cast<off_t>(written)) == 0) {
      shared_->capacity.store(std::min(shared_->capacity.load(std::memory_order_relaxed), written),
                              std::memory_order_release);
    }
  }
  if (!unmap) return;
  for (auto& slot : windows_) {
    if (auto* w = slot.exchange(nullptr, std::memory_order_relaxed); w != nullptr) ::munmap(w, window_bytes);
  }
  ::close(fd_);
  fd_ = -1;
  // The state page stays mapped in a forked child's parent, and vice versa:
  // unmapping here only drops this process's view.
  final_bytes_ = shared_->tail.load(std::memory_order_relaxed) & ~closed_bit;
  final_dropped_ = shared_->dropped.load(std::memory_order_relaxed);
  ::munmap(shared_, sizeof(shared_state));
  shared_ = nullptr;
}

std::uint64_t csv_log_writer::bytes_written() const noexcept {
  return shared_ == nullptr ? final_bytes_ : shared_->tail.load(std::memory_order_relaxed) & ~closed_bit;
}

std::uint64_t csv_log_writer::dropped_rows() const noexcept {
  return shared_ == nullptr ? final_dropped_ : shared_->dropped.load(std::memory_order_relaxed);
}

}  // namespace gpumem
