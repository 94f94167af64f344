// csv_log_writer: append-only, crash-durable CSV through a MAP_SHARED file mapping
// (include/gpumem/csv_log_writer.hpp says what it guarantees).
//
// Layout: the file is mapped in fixed 256 MiB windows of address space (mapping
// past the end of a file is allowed; only touching those pages is not), so growing
// the file never moves a window and writers never wait on a remap. The write
// offset, the allocated size, the counters and the growth lock live in a
// MAP_SHARED anonymous page: a forked child shares them, so parent and child
// append to one file safely.
//
// Invariant: bytes below `tail` were reserved by a writer; bytes below
// `capacity` are allocated in the file (fallocate) and mapped by whoever
// allocated them. A row is reserved only if it ends at least two markers'
// worth of bytes below `capacity`, so the markers always find room.

#include <gpumem/csv_log_writer.hpp>
#include <gpumem/detail/fault_overlay.hpp>
#include <gpumem/detail/file_kind.hpp>
#include <gpumem/detail/file_space.hpp>
#include <gpumem/detail/futex.hpp>
#include <gpumem/detail/live_list.hpp>
#include <gpumem/detail/os_thread.hpp>
#include <gpumem/detail/sigbus_mask.hpp>
#include <gpumem/detail/spin_mutex.hpp>
#include <gpumem/diagnostics.hpp>
#include <gpumem/error.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>

#include <sched.h>

namespace gpumem {

struct csv_log_writer::shared_state {
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "needs address-free atomics across fork");
  /// Bytes reserved; bit 63 set once the owner closed the log (later rows are not
  /// stored), bit 62 while a truncation is repaired (rows are dropped, counted).
  alignas(64) std::atomic<std::uint64_t> tail{0};
  /// Bytes allocated in the file (same cache line: writers read both).
  std::atomic<std::uint64_t> capacity{0};
  /// Bumped when a truncation moves `tail` back: a row reserved before may have
  /// been stored where later rows go (its writer sees the change and counts it).
  std::atomic<std::uint32_t> epoch{0};
  alignas(64) std::atomic<std::uint64_t> dropped{0};
  std::atomic<int> grow_errno{0};               ///< first reason the file could not grow
  std::atomic<std::uint32_t> truncations{0};    ///< times found truncated under us
  std::atomic<bool> space_notified{false};      ///< "rows are dropped" said once
  std::atomic<bool> journal_cut{false};         ///< row_journal's file was truncated (journal_truncated())
  std::atomic<std::int64_t> retry_after_ns{0};  ///< no growth attempt before (CLOCK_MONOTONIC_COARSE)
  pthread_mutex_t grow;  ///< process-shared, robust: a writer killed mid-growth does not wedge the others
};

namespace {

constexpr std::uint64_t closed_bit = std::uint64_t{1} << 63;  // in `tail`: the owner closed the log
constexpr std::uint64_t paused_bit = std::uint64_t{1} << 62;  // in `tail`: a truncation is being repaired
constexpr std::uint64_t offset_mask = paused_bit - 1;
constexpr std::uint64_t min_chunk = std::uint64_t{1} << 20;   // first growth: 1 MiB
constexpr std::uint64_t max_chunk = std::uint64_t{64} << 20;  // then by the file's size, up to 64 MiB
constexpr std::uint64_t page_bytes = 4096;                    // growth and populate granularity
constexpr std::size_t marker_max = csv_log_writer::marker_bytes;
constexpr std::uint64_t kept_room = 2 * marker_max;       // rows never use the last bytes
constexpr std::int64_t grow_backoff_ns = 100'000'000;     // after a failed growth
constexpr std::int64_t truncation_poll_ns = 200'000'000;  // the helper's fstat
constexpr std::int64_t pause_wait_ns = 20'000'000;        // longest wait on a repair's pause
constexpr std::int64_t note_wait_ns = 1'000'000'000;      // longest wait at close for a repair's note
constexpr std::size_t reason_max = 120;

std::int64_t coarse_now_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::uint64_t round_up(std::uint64_t v, std::uint64_t to) noexcept { return (v + to - 1) / to * to; }

// csv_log_writer::overlays_: the low half counts the overlays begun, the high half
// the overlays a repair undid.
constexpr std::uint64_t overlays_begun_mask = 0xffff'ffff;
constexpr bool no_overlay(std::uint64_t overlays) noexcept {
  return (overlays & overlays_begun_mask) == overlays >> 32;
}

// Test seam (csv_log_writer::set_repair_hook_for_testing); null outside tests.
std::atomic<csv_log_writer::repair_hook_fn> repair_hook{nullptr};

void at_repair_point(csv_log_writer::repair_point p) noexcept {
  if (auto* h = repair_hook.load(std::memory_order_acquire); h != nullptr) [[unlikely]] { h(p); }
}

[[noreturn]] void throw_log_error(std::string const& path, std::string const& what) {
  throw logic_error{"gpumem: cannot write the allocation log '" + path + "': " + what};
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

// Open writers, for the atexit hook.
detail::live_list<csv_log_writer> live_writers;
pthread_once_t atexit_once = PTHREAD_ONCE_INIT;

}  // namespace

// ---------------------------------------------------------------------------
// The SIGBUS guard: which address ranges are log windows, and the handler.

struct log_fault_guard {
  static constexpr std::size_t slots = 8192;
  static inline std::atomic<std::uintptr_t> begin[slots]{};
  static inline std::atomic<csv_log_writer*> owner[slots]{};
  static inline std::atomic<std::size_t> used{0};  // high-water mark of slots
  static constexpr std::uintptr_t claimed = 1;     // a slot being filled
  static inline std::uintptr_t page = 4096;
  static inline pthread_once_t once = PTHREAD_ONCE_INIT;

  // The SIGBUS action the program set, to which every fault that is not the
  // log's goes (chain()): what it had when the guard was installed, then what it
  // set through the preloaded shim's sigaction/signal hooks (sigbus_sigaction),
  // which leave the guard in place. A ring of copies that are never changed while
  // current, so the handler reads one without a lock while the program sets the
  // next (a copy is rewritten only `views` settings later).
  static constexpr unsigned views = 16;
  static inline struct sigaction view_slots[views] {};  // [0]: SIG_DFL until installed
  static inline std::atomic<unsigned> view_at{0};
  static inline std::atomic<bool> installed{false};
  static inline std::atomic<bool> view_locked{false};
  static inline thread_local bool in_guard = false;  // this thread holds view_lock

  // Serializes installing the guard, the program's sigaction(SIGBUS) calls and
  // the handler's own changes. Held with every signal blocked, so no handler on
  // the holder's thread waits for it; the guard's own sigaction calls, which
  // reach the shim's hook, pass through while it is held (in_guard). Taken
  // after first_use() has run (the fork handler that releases it in a child).
  class view_lock {
   public:
    view_lock() noexcept {
      sigset_t all;
      sigfillset(&all);
      (void)::pthread_sigmask(SIG_SETMASK, &all, &saved_);
      while (view_locked.exchange(true, std::memory_order_acquire)) detail::cpu_relax();
      in_guard = true;
    }
    ~view_lock() {
      in_guard = false;
      view_locked.store(false, std::memory_order_release);
      (void)::pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
    }
    view_lock(view_lock const&) = delete;
    view_lock& operator=(view_lock const&) = delete;

   private:
    sigset_t saved_;
  };

  static void first_use() noexcept {
    long const ps = ::sysconf(_SC_PAGESIZE);
    if (ps > 0) page = static_cast<std::uintptr_t>(ps);
    ::pthread_atfork(nullptr, nullptr, &after_fork_in_child);
  }

  static struct sigaction default_action() noexcept {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    return dfl;
  }
  static struct sigaction view() noexcept { return view_slots[view_at.load(std::memory_order_acquire) % views]; }
  static void publish(struct sigaction const& a) noexcept {  // under view_lock
    unsigned const next = view_at.load(std::memory_order_relaxed) + 1;
    view_slots[next % views] = a;
    view_at.store(next, std::memory_order_release);
  }

  static void install() noexcept {
    if (installed.load(std::memory_order_acquire)) return;
    pthread_once(&once, &first_use);
    view_lock lock;
    if (installed.load(std::memory_order_relaxed)) return;
    struct sigaction sa {};
    sa.sa_sigaction = &on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    struct sigaction old {};
    if (::sigaction(SIGBUS, nullptr, &old) != 0) return;
    sa.sa_mask = old.sa_mask;  // what the program's handler would have blocked
    publish(old);
    if (::sigaction(SIGBUS, &sa, nullptr) == 0) installed.store(true, std::memory_order_release);
  }

  // The program's sigaction(SIGBUS) through the shim's hook (sigbus_sigaction).
  static int program_sigaction(struct sigaction const* act, struct sigaction* old, detail::sigaction_fn real) noexcept {
    if (in_guard) return real(SIGBUS, act, old);  // the guard's own call
    pthread_once(&once, &first_use);
    view_lock lock;
    if (!installed.load(std::memory_order_relaxed)) return real(SIGBUS, act, old);
    if (old != nullptr) *old = view();
    if (act != nullptr) publish(*act);
    return 0;
  }

  // Only the forking thread lives on in a child: an overlay another thread's
  // handler had begun is mapped there already or never will be. Count it as made,
  // or a repair in the child could never undo it and its writers would wait on it.
  static void after_fork_in_child() noexcept {
    view_locked.store(false, std::memory_order_relaxed);  // held by a thread the child lacks
    auto const n = used.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < n; ++i) {
      if (begin[i].load(std::memory_order_acquire) <= claimed) continue;
      if (csv_log_writer* w = owner[i].load(std::memory_order_acquire); w != nullptr) {
        w->overlays_made_.store(static_cast<std::uint32_t>(w->overlays_.load() & overlays_begun_mask));
      }
    }
  }

  // Lock-free (claim a slot with a CAS): a fork while another thread registers
  // must not leave the child a held lock.
  static void add(void* window, csv_log_writer* w) noexcept {
    for (std::size_t i = 0; i < slots; ++i) {
      std::uintptr_t expected = 0;
      if (!begin[i].compare_exchange_strong(expected, claimed, std::memory_order_acq_rel)) continue;
      owner[i].store(w, std::memory_order_relaxed);
      begin[i].store(reinterpret_cast<std::uintptr_t>(window), std::memory_order_release);
      auto u = used.load(std::memory_order_relaxed);
      while (u < i + 1 && !used.compare_exchange_weak(u, i + 1, std::memory_order_release)) {}
      return;
    }  // all slots taken: that window is unguarded (more than 2 PiB of logs)
  }

  static void remove(void* window) noexcept {
    auto const b = reinterpret_cast<std::uintptr_t>(window);
    for (std::size_t i = 0; i < used.load(std::memory_order_acquire); ++i) {
      if (begin[i].load(std::memory_order_relaxed) != b) continue;
      owner[i].store(nullptr, std::memory_order_relaxed);
      begin[i].store(0, std::memory_order_release);
    }
  }

  // Other mappings lent the guard (detail::guard_mapping): few (a journal per log).
  static constexpr std::size_t other_slots = 256;
  static inline std::atomic<std::uintptr_t> other_begin[other_slots]{};
  static inline std::atomic<std::size_t> other_bytes[other_slots]{};
  static inline std::atomic<detail::fault_fn> other_fn[other_slots]{};
  static inline std::atomic<void*> other_context[other_slots]{};

  static bool add_other(void* begin, std::size_t bytes, detail::fault_fn fn, void* context) noexcept {
    install();
    for (std::size_t i = 0; i < other_slots; ++i) {
      std::uintptr_t expected = 0;
      if (!other_begin[i].compare_exchange_strong(expected, claimed, std::memory_order_acq_rel)) continue;
      other_bytes[i].store(bytes, std::memory_order_relaxed);
      other_fn[i].store(fn, std::memory_order_relaxed);
      other_context[i].store(context, std::memory_order_relaxed);
      other_begin[i].store(reinterpret_cast<std::uintptr_t>(begin), std::memory_order_release);
      return true;
    }
    return false;
  }

  static void remove_other(void* begin) noexcept {
    auto const b = reinterpret_cast<std::uintptr_t>(begin);
    for (auto& slot : other_begin) {
      std::uintptr_t expected = b;
      slot.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
    }
  }

  // A fault in another guarded mapping: its owner is told, then the page is
  // replaced. False: not in one (or the page could not be replaced).
  static bool overlay_other(std::uintptr_t addr) noexcept {
    for (std::size_t i = 0; i < other_slots; ++i) {
      auto const b = other_begin[i].load(std::memory_order_acquire);
      if (b <= claimed || addr < b || addr - b >= other_bytes[i].load(std::memory_order_relaxed)) continue;
      auto const page_at = addr & ~(page - 1);
      if (auto* fn = other_fn[i].load(std::memory_order_relaxed); fn != nullptr) {
        fn(other_context[i].load(std::memory_order_relaxed), page_at - b);
      }
      // The system call itself, not libc's mmap: nothing but the kernel runs in
      // the handler (a sanitizer's interceptor would; ThreadSanitizer would also
      // count the replacement as a write racing with the formatter's reads of the
      // page, which the owner allows for: what lay past the cut is never trusted).
      void* const p = reinterpret_cast<void*>(page_at);
      return ::syscall(SYS_mmap, p, page, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) ==
             static_cast<long>(page_at);
    }
    return false;
  }

  // Async-signal-safe: atomics, mmap, sigaction, raise and a futex wake only.
  static void on_sigbus(int sig, siginfo_t* info, void* context) {
    int const saved_errno = errno;
    if (info != nullptr && info->si_code > 0) {  // a fault, not kill()/raise()
      auto const addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
      if (overlay_other(addr)) {
        errno = saved_errno;
        return;
      }
      auto const n = used.load(std::memory_order_acquire);
      for (std::size_t i = 0; i < n; ++i) {
        auto const b = begin[i].load(std::memory_order_acquire);
        if (b <= claimed || addr < b || addr - b >= csv_log_writer::window_bytes) continue;
        csv_log_writer* w = owner[i].load(std::memory_order_acquire);
        // The page is past the end of the file (truncated under us) or could not
        // be backed: let the store land in anonymous memory, and tell the writer.
        // Counted before the page is mapped (a writer whose copy lands there sees
        // the count move) and after (a repair undoes only what it knows is mapped).
        void* const p = reinterpret_cast<void*>(addr & ~(page - 1));
        if (w != nullptr) {
          auto v = w->overlays_.load(std::memory_order_relaxed);
          while (!w->overlays_.compare_exchange_weak(v, (v & ~overlays_begun_mask) | ((v + 1) & overlays_begun_mask))) {
          }
        }
        at_repair_point(csv_log_writer::repair_point::fault_caught);
        void* const r = ::mmap(p, page, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (w != nullptr) {
          w->overlays_made_.fetch_add(1);  // even if it failed: a repair then merely remaps once more
          w->wake_helper();                // an atomic add and a futex wake: async-signal-safe
        }
        if (r != p) break;  // cannot repair: treat as not ours
        at_repair_point(csv_log_writer::repair_point::fault_overlaid);
        errno = saved_errno;
        return;
      }
    }
    chain(sig, info, context);
    errno = saved_errno;
  }

  // What would have happened without us: the program's action (view()).
  static void chain(int sig, siginfo_t* info, void* context) {
    struct sigaction const act = view();
    bool const sent = info == nullptr || info->si_code <= 0;  // kill(), raise(): not a fault
    if (act.sa_handler == SIG_IGN && sent) return;
    if (act.sa_handler == SIG_DFL || act.sa_handler == SIG_IGN) {
      {
        // The guard steps down: the process ends now.
        view_lock lock;
        installed.store(false, std::memory_order_relaxed);
        struct sigaction const dfl = default_action();
        ::sigaction(sig, &dfl, nullptr);
      }
      // A fault repeats on return and now takes the default action (core dump
      // at the faulting instruction); a sent signal is raised again.
      if (sent) ::raise(sig);
      return;
    }
    if ((act.sa_flags & SA_RESETHAND) != 0) {
      view_lock lock;  // one-shot: the kernel would have reset it on delivery
      publish(default_action());
    }
    // The program's handler runs with what it asked to block (SIGBUS too, unless
    // SA_NODEFER), as the kernel would have run it.
    sigset_t saved;
    (void)::pthread_sigmask(SIG_BLOCK, &act.sa_mask, &saved);
    if ((act.sa_flags & SA_NODEFER) != 0) {
      sigset_t bus;
      sigemptyset(&bus);
      sigaddset(&bus, sig);
      (void)::pthread_sigmask(SIG_UNBLOCK, &bus, nullptr);
    }
    if ((act.sa_flags & SA_SIGINFO) != 0) {
      act.sa_sigaction(sig, info, context);
    } else {
      act.sa_handler(sig);
    }
    (void)::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  }
};

int detail::sigbus_sigaction(struct sigaction const* act, struct sigaction* old, sigaction_fn real) noexcept {
  return log_fault_guard::program_sigaction(act, old, real);
}

bool detail::guard_mapping(void* begin, std::size_t bytes, fault_fn on_fault, void* context) noexcept {
  return log_fault_guard::add_other(begin, bytes, on_fault, context);
}

void detail::unguard_mapping(void* begin) noexcept { log_fault_guard::remove_other(begin); }

// ---------------------------------------------------------------------------

void csv_log_writer::set_repair_hook_for_testing(repair_hook_fn hook) noexcept {
  repair_hook.store(hook, std::memory_order_release);
}

void csv_log_writer::notify_stderr(std::string_view line) noexcept {
  log_message(log_level::warn, "%.*s", static_cast<int>(line.size()), line.data());
}

void csv_log_writer::notify(std::string const& line) const noexcept {
  if (notify_ != nullptr) notify_(line);
}

csv_log_writer::csv_log_writer(std::string path, notify_fn notifier)
    : requested_path_{std::move(path)}, notify_{notifier}, owner_pid_{::getpid()} {
  open_file();

  void* page = ::mmap(nullptr, sizeof(shared_state), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    int const err = errno;
    ::close(fd_);
    throw_log_error(path_, std::string{"cannot map its state: "} + detail::error_text(err));
  }
  shared_ = new (page) shared_state{};
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&shared_->grow, &attr);
  pthread_mutexattr_destroy(&attr);

  log_fault_guard::install();
  if (!make_room(csv_log_header.size() + kept_room, false)) {
    int const err = shared_->grow_errno.load(std::memory_order_relaxed);
    finish(true);
    throw_log_error(path_, std::string{"cannot allocate room for it: "} + detail::error_text(err != 0 ? err : ENOSPC));
  }
  append(csv_log_header.data(), csv_log_header.size());
  start_helper();

  pthread_once(&atexit_once, [] { std::atexit(&csv_log_writer::finish_all_at_exit); });
  live_writers.add(this);
}

// Opens the requested path, or "<path>.<pid>" when another writer holds it, and
// empties it. The lock comes before the truncation: a file in use is never cut.
void csv_log_writer::open_file() {
  auto open_locked = [this](std::string const& p, bool& busy) {
    busy = false;
    int const fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw_log_error(p, detail::error_text(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw_log_error(p, detail::not_a_regular_file(st.st_mode));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
      ::close(fd);
      busy = true;
      return -1;
    }  // other errors (no locks on this file system): go on unprotected
    return fd;
  };
  bool busy = false;
  fd_ = open_locked(requested_path_, busy);
  path_ = requested_path_;
  for (int n = 0; busy && n < 10; ++n) {
    path_ = requested_path_ + "." + std::to_string(owner_pid_) + (n == 0 ? "" : "." + std::to_string(n));
    fd_ = open_locked(path_, busy);
  }
  if (busy) throw_log_error(requested_path_, "it and ten alternatives are in use by other processes");
  if (::ftruncate(fd_, 0) != 0) {
    int const err = errno;
    ::close(fd_);
    throw_log_error(path_, detail::error_text(err));
  }
  // Rows a crashed writer of this path left queued belong to the log just emptied.
  (void)::unlink((path_ + ".journal").c_str());
  if (path_ != requested_path_) {
    notify("the allocation log '" + requested_path_ + "' is in use by another process; this process (pid " +
           std::to_string(owner_pid_) + ") logs to '" + path_ + "'");
  }
}

csv_log_writer::~csv_log_writer() {
  live_writers.remove(this);
  close();
}

void csv_log_writer::finish_all_at_exit() noexcept {
  live_writers.for_each([](csv_log_writer* w) {
    // Keep the mappings: a thread still running at exit may be mid-copy.
    w->populate_on_.store(false, std::memory_order_relaxed);
    w->finish(false);  // the helper sees the closed log and ends
  });
}

void csv_log_writer::write(log_row const& row) noexcept {
  char buf[max_row_bytes];
  append(buf, format_row(buf, row));
}

void csv_log_writer::append(char const* data, std::size_t len) noexcept {
  if (std::uint32_t epoch = 0; auto const off = reserve(len, epoch)) store(*off, data, len, epoch);
}

bool csv_log_writer::append_batch(char const* data, std::size_t len, std::uint64_t rows, reserved_fn on_reserved,
                                  void* context) noexcept {
  if (shared_ == nullptr) return false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    // A truncation since the last batch is repaired first (header, marker, new
    // offset): a pwrite past the end of a cut file would leave a hole of NULs
    // where the header was. One fstat under the growth lock per batch.
    recover();
    std::uint32_t epoch = 0;
    auto const off = reserve(len, epoch);
    if (!off) {  // counted as one row, unless closed
      if ((shared_->tail.load() & closed_bit) == 0 && rows > 1) count_lost(rows - 1);
      return false;
    }
    if (on_reserved != nullptr) on_reserved(context, *off);
    bool cut = false;
    {
      // Under the growth lock, as repairs run: none can start while the write is
      // under way (a write into a cut file extends it page by page; a repair that
      // saw it half done took the batch for lost while the write went on, and the
      // batch was written twice).
      grow_lock lock{&shared_->grow};
      // A repair since the reservation restarted the log before it: the place
      // belongs to later rows now, and the batch takes a new one.
      if (shared_->epoch.load() != epoch) continue;
      if (!detail::pwrite_all(fd_, data, len, *off)) {  // allocated, so not for want of room: an I/O error
        count_lost(rows);
        return false;
      }
      // A truncation between the repair above and this write: the write made the
      // file as long as before, NULs before it, the header among them.
      cut = (shared_->tail.load() & closed_bit) == 0 && rewrite_cut_header_locked();
    }
    if (cut) notify_header_cut();
    return true;
  }
  count_lost(rows);
  return false;
}

void csv_log_writer::populate_ahead(bool on) noexcept {
  populate_on_.store(on && helper_started_, std::memory_order_relaxed);
}

void csv_log_writer::count_lost(std::uint64_t rows) noexcept {
  if (shared_ != nullptr && rows != 0) shared_->dropped.fetch_add(rows, std::memory_order_relaxed);
}

void csv_log_writer::journal_truncated(std::string const& journal, std::uint64_t size, std::uint64_t lost) noexcept {
  shared_state* const s = shared_;
  if (s == nullptr) return;
  s->journal_cut.store(true, std::memory_order_relaxed);
  // In the log now (through the file: the journal's helper may be the caller), so
  // a crash afterwards still leaves it.
  if (s->dropped.load(std::memory_order_relaxed) != 0) append_marker(marker_max, false, true);
  notify("the allocation log's journal '" + journal + "' was truncated by another program while in use (to " +
         std::to_string(size) + " bytes): " +
         (lost == 0 ? std::string{"no row queued in it was lost"}
                    : std::to_string(lost) + " rows queued in it are lost, counted in a '#gpumem incomplete' line") +
         "; rows are written directly from now on");
}

std::optional<std::uint64_t> csv_log_writer::reserve(std::size_t len, std::uint32_t& epoch) noexcept {
  shared_state* const s = shared_;
  if (s == nullptr || len == 0) return std::nullopt;
  // Sequentially consistent (free on x86: the CAS is a full barrier anyway): a
  // reservation that succeeds before a repair pauses the log read the epoch from
  // before it, one after the repair the epoch from after.
  std::uint64_t off = s->tail.load();
  for (;;) {
    if ((off & (closed_bit | paused_bit)) != 0) [[unlikely]] {
      if ((off & closed_bit) != 0) return std::nullopt;  // closed: not stored
      if (!wait_unpaused(off)) {
        count_dropped(true);
        return std::nullopt;
      }
      continue;
    }
    if (off + len + kept_room > s->capacity.load(std::memory_order_acquire)) [[unlikely]] {
      if (!make_room(off + len + kept_room, false)) {
        count_dropped(false);
        return std::nullopt;
      }
      off = s->tail.load();
      continue;
    }
    epoch = s->epoch.load();
    if (s->tail.compare_exchange_weak(off, off + len)) return off;
  }
}

// A repair pauses reservations for a few atomic operations; should its thread be
// preempted right then, wait (yielding) for a while, but never forever: a fork
// at that moment leaves the pause to a thread the child does not have.
bool csv_log_writer::wait_unpaused(std::uint64_t& off) noexcept {
  auto const give_up = coarse_now_ns() + pause_wait_ns;
  while ((off & paused_bit) != 0 && (off & closed_bit) == 0) {
    if (coarse_now_ns() > give_up) return false;
    ::sched_yield();
    off = shared_->tail.load();
  }
  return true;
}

void csv_log_writer::store(std::uint64_t offset, char const* data, std::size_t len, std::uint32_t epoch) noexcept {
  detail::scoped_sigbus_unblocked const faults_reach_the_guard;  // (sigbus_mask.hpp)
  auto const end = offset + len;
  if (windows_[offset / window_bytes].load(std::memory_order_acquire) == nullptr ||
      windows_[(end - 1) / window_bytes].load(std::memory_order_acquire) == nullptr) [[unlikely]] {
    // Allocated by another process of the family: map it here too.
    grow_lock lock{&shared_->grow};
    if (!map_windows_locked(end)) {
      shared_->dropped.fetch_add(1, std::memory_order_relaxed);  // reserved but unwritable: a NUL gap
      return;
    }
  }
  // Read before the copy: a copy that may go to an anonymous page finds one
  // outstanding here, or the count moved by the time it is done.
  auto const overlays = overlays_.load(std::memory_order_acquire);
  copy_out(offset, data, len);
  if (overlays_.load(std::memory_order_acquire) != overlays || !no_overlay(overlays) || shared_->epoch.load() != epoch)
      [[unlikely]] {
    store_again(offset, data, len, epoch);
    return;
  }
  // Crossed a grain boundary: the helper populates the next pages before we get there.
  if (((offset ^ end) >> prefault_grain_shift) != 0 && populate_on_.load(std::memory_order_relaxed)) { wake_helper(); }
}

// Copied while the file was truncated under us, or while a page of the mapping was
// anonymous. If the row's place is still its own (the log did not restart since it
// was reserved), repair and store it again until a copy is known to reach the file;
// else it is lost, and counted. Either way no page stays anonymous.
void csv_log_writer::store_again(std::uint64_t offset, char const* data, std::size_t len,
                                 std::uint32_t epoch) noexcept {
  auto const give_up = coarse_now_ns() + pause_wait_ns;
  for (;;) {
    recover();  // the file whole again, every window mapped from it
    auto const overlays = overlays_.load(std::memory_order_acquire);
    // Checked after the repair: one that restarted the log gave the place away.
    if (shared_->epoch.load() != epoch) break;
    if (no_overlay(overlays)) {
      copy_out(offset, data, len);
      if (overlays_.load(std::memory_order_acquire) == overlays && shared_->epoch.load() == epoch) return;
    }
    // Not settled for that long: truncated again and again, or a remap keeps failing.
    if (coarse_now_ns() > give_up) break;
    if (!no_overlay(overlays)) ::sched_yield();  // another thread's handler is still mapping its page
  }
  count_dropped(true);
  if (!no_overlay(overlays_.load(std::memory_order_acquire))) recover();
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

void csv_log_writer::wake_helper() noexcept {
  helper_wake_.fetch_add(1, std::memory_order_release);
  detail::futex_wake(&helper_wake_);
}

bool csv_log_writer::make_room(std::uint64_t need, bool ahead) noexcept {
  shared_state* const s = shared_;
  if (need <= s->capacity.load(std::memory_order_acquire)) return true;
  if ((need - 1) / window_bytes >= max_windows) {
    if (ahead) return false;
    int expected = 0;
    s->grow_errno.compare_exchange_strong(expected, EFBIG, std::memory_order_relaxed);
    return false;
  }
  // A full disk costs a dropped row no system call and no lock.
  if (coarse_now_ns() < s->retry_after_ns.load(std::memory_order_relaxed)) return false;
  bool truncated = false;
  {
    grow_lock lock{&s->grow};
    if (need <= s->capacity.load(std::memory_order_relaxed)) return true;
    if ((s->tail.load() & closed_bit) != 0) return false;  // (a repair holds this lock while paused)
    // Growing a file someone truncated would leave its start a NUL hole without a
    // header: repair first.
    struct stat st {};
    truncated = ::fstat(fd_, &st) == 0 &&
                static_cast<std::uint64_t>(st.st_size) < s->capacity.load(std::memory_order_relaxed);
    if (!truncated) {
      at_repair_point(repair_point::growing);
      if (!grow_locked(need, ahead)) return false;
      // A truncation between the check above and the growth is undone by it: the
      // file is as long as before, zeros where the erased rows were. No row stored
      // since is lost (a store that faulted before the growth is stored again),
      // so the rows go on where they are; only the header shows a cut inside it:
      // it is written again, and a marker says what happened.
      if (!rewrite_cut_header_locked()) return true;
    }
  }
  if (truncated) {
    recover();
    return make_room(need, ahead);
  }
  notify_header_cut();
  return true;
}

bool csv_log_writer::rewrite_cut_header_locked() noexcept {
  if (!header_cut()) return false;
  (void)!::pwrite(fd_, csv_log_header.data(), csv_log_header.size(), 0);
  shared_->truncations.fetch_add(1, std::memory_order_relaxed);
  // Through the file, not the mapping: the helper may be the one here.
  append_marker(marker_max, false, true);
  note_due();
  return true;
}

void csv_log_writer::notify_header_cut() noexcept {
  notify_due("the allocation log '" + path_ +
             "' was truncated by another program while in use: its earlier rows are gone (the file holds NUL bytes "
             "where they were); a line in the log says so");
}

void csv_log_writer::note_due() noexcept { notes_due_.fetch_add(1, std::memory_order_relaxed); }

void csv_log_writer::notify_due(std::string const& line) noexcept {
  at_repair_point(repair_point::noting);
  notify(line);
  if (notes_due_.fetch_sub(1, std::memory_order_release) == 1) detail::futex_wake(&notes_due_);
}

void csv_log_writer::wait_for_notes() noexcept {
  auto const give_up = coarse_now_ns() + note_wait_ns;
  for (std::uint32_t due; (due = notes_due_.load(std::memory_order_acquire)) != 0;) {
    auto const now = coarse_now_ns();
    if (now >= give_up) return;
    detail::futex_wait(&notes_due_, due, give_up - now);
  }
}

bool csv_log_writer::header_cut() const noexcept {
  // Only once the header was stored: the constructor's first growth comes before it.
  if ((shared_->tail.load() & offset_mask) < csv_log_header.size()) return false;
  char head[csv_log_header.size()];
  auto const n = ::pread(fd_, head, sizeof head, 0);
  // A read that fails says nothing.
  return n >= 0 &&
         (static_cast<std::size_t>(n) < sizeof head || std::memcmp(head, csv_log_header.data(), sizeof head) != 0);
}

bool csv_log_writer::grow_locked(std::uint64_t need, bool ahead) noexcept {
  shared_state* const s = shared_;
  auto const cap = s->capacity.load(std::memory_order_relaxed);
  auto const chunk = std::clamp(cap, min_chunk, max_chunk);
  auto target = std::max(round_up(need, chunk), cap + chunk);
  int err = detail::allocate_file(fd_, cap, target - cap);
  if (err == ENOSPC || err == EFBIG || err == EDQUOT) {  // take what there is
    target = round_up(need, page_bytes);
    err = detail::allocate_file(fd_, cap, target - cap);
  }
  if (err == 0 && !map_windows_locked(target)) err = errno != 0 ? errno : ENOMEM;
  // Growing ahead (the helper) is a guess: its failure leaves the last bytes to
  // the writers, who need less.
  if (err != 0 && ahead) return false;
  if (err != 0) {
    int expected = 0;
    s->grow_errno.compare_exchange_strong(expected, err, std::memory_order_relaxed);
    s->retry_after_ns.store(coarse_now_ns() + grow_backoff_ns, std::memory_order_relaxed);
    return false;
  }
  s->capacity.store(target, std::memory_order_release);  // only now may writers reserve up to it
  return true;
}

bool csv_log_writer::map_windows_locked(std::uint64_t end) noexcept {
  for (std::uint64_t k = 0; k * window_bytes < end && k < max_windows; ++k) {
    if (windows_[k].load(std::memory_order_relaxed) != nullptr) continue;
    void* w = ::mmap(nullptr, window_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                     static_cast<off_t>(k * window_bytes));
    if (w == MAP_FAILED) return false;
    log_fault_guard::add(w, this);
    windows_[k].store(static_cast<char*>(w), std::memory_order_release);
  }
  return true;
}

void csv_log_writer::count_dropped(bool lost_page) noexcept {
  shared_state* const s = shared_;
  s->dropped.fetch_add(1, std::memory_order_relaxed);
  if (lost_page || s->space_notified.exchange(true, std::memory_order_relaxed)) return;
  // The first row the file had no room for: say so in the log while the room kept
  // for it is there, then on stderr.
  append_marker(marker_max, false);
  int const err = s->grow_errno.load(std::memory_order_relaxed);
  notify("the allocation log '" + path_ + "' cannot grow (" + detail::error_text(err != 0 ? err : ENOSPC) +
         "): rows are dropped from now on and counted; the log will end with a '#gpumem incomplete' line");
}

std::size_t csv_log_writer::format_marker(char (&line)[marker_bytes]) const noexcept {
  shared_state* const s = shared_;
  // The reason: what went wrong.
  char reason[reason_max + 1] = {};
  std::size_t rn = 0;
  auto add = [&](const char* text) {
    if (rn != 0 && rn + 2 < reason_max) {
      reason[rn++] = ';';
      reason[rn++] = ' ';
    }
    for (; *text != '\0' && rn < reason_max; ++text) reason[rn++] = *text;
  };
  if (s->truncations.load(std::memory_order_relaxed) != 0) {
    add("truncated by another program while in use: earlier rows are lost");
  }
  if (s->journal_cut.load(std::memory_order_relaxed)) {
    add("its journal was truncated by another program while in use: rows queued in it are lost");
  }
  if (int const err = s->grow_errno.load(std::memory_order_relaxed); err != 0) add(detail::error_text(err));
  if (rn == 0) add("rows lost");
  return format_incomplete_marker(line, sizeof line, s->dropped.load(std::memory_order_relaxed), {reason, rn});
}

bool csv_log_writer::append_marker(std::uint64_t keep, bool close, bool through_file) noexcept {
  shared_state* const s = shared_;
  char line[marker_bytes];
  auto const len = format_marker(line);
  if (len == 0) return false;
  std::uint64_t off = s->tail.load();
  std::uint32_t epoch = 0;
  for (;;) {
    if ((off & (closed_bit | paused_bit)) != 0) return false;
    bool const fits = off + len + keep <= s->capacity.load(std::memory_order_acquire);
    std::uint64_t const next = fits ? off + len : off;
    if (!fits && !close) return false;
    epoch = s->epoch.load();
    if (s->tail.compare_exchange_weak(off, close ? next | closed_bit : next)) {
      if (!fits) return false;  // closed without room for it
      break;
    }
  }
  if (through_file) {
    (void)!::pwrite(fd_, line, len, static_cast<off_t>(off));
  } else {
    store(off, line, len, epoch);
  }
  return true;
}

void csv_log_writer::recover() noexcept {
  std::uint64_t kept = 0;
  bool lost = false;
  {
    grow_lock lock{&shared_->grow};
    lost = recover_locked(kept);
    if (lost) note_due();
    if (lost || !no_overlay(overlays_.load())) {
      // Replace the pages the SIGBUS handler made anonymous (and any page still
      // mapped from before) by the file's. Every overlay counted as made by now
      // was mapped before this remap, which undoes it; one mapped after it is
      // counted after this read, and keeps the log marked for the next repair
      // (its writer's, at the latest).
      auto const made = overlays_made_.load();
      bool remapped = true;
      for (std::size_t k = 0; k < max_windows; ++k) {
        char* w = windows_[k].load(std::memory_order_relaxed);
        if (w == nullptr) continue;
        remapped &= ::mmap(w, window_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd_,
                           static_cast<off_t>(k * window_bytes)) == w;
      }
      at_repair_point(repair_point::remapped);
      if (remapped) {
        auto v = overlays_.load();
        while (!overlays_.compare_exchange_weak(v, (std::uint64_t{made} << 32) | (v & overlays_begun_mask))) {}
      }
      remaps_.fetch_add(1, std::memory_order_relaxed);
      wake_helper();  // it populates the windows again from the write offset
    }
  }
  if (!lost) return;
  notify_due("the allocation log '" + path_ + "' was truncated by another program while in use (to " +
             std::to_string(kept) + " bytes): its earlier rows are gone; logging goes on after a line that says so");
}

// Under the growth lock. True when the file was found shorter than what was
// written: then it is allocated again, its header restored, and the write
// offset moved to the end of what is left.
bool csv_log_writer::recover_locked(std::uint64_t& kept) noexcept {
  shared_state* const s = shared_;
  if ((s->tail.load() & closed_bit) != 0) return false;
  auto const cap = s->capacity.load(std::memory_order_relaxed);
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || static_cast<std::uint64_t>(st.st_size) >= cap) return false;
  auto const size = static_cast<std::uint64_t>(st.st_size);
  at_repair_point(repair_point::truncation_seen);
  // Rows go on after what is left, behind a marker. Everything that can be is
  // prepared first; then for a few atomic operations reservations are paused
  // (writers wait) while the epoch moves on: a row reserved before and stored
  // after the file is whole again may be overwritten, and its writer, seeing the
  // new epoch, counts it. Rows reserved after the restart but stored before the
  // file is whole again fault into anonymous pages (the restart is in a page
  // wholly past the end of the file), and their writers store them again after
  // the repair.
  std::uint64_t fill_from = size;  // [fill_from, restart): "\n" and/or a '#' filler line
  bool cut_row = false;            // the file ends inside a row: end it (readers skip it)
  if (size < csv_log_header.size()) {
    fill_from = csv_log_header.size();  // the header is written again
  } else {
    char last = '\n';
    cut_row = ::pread(fd_, &last, 1, static_cast<off_t>(size - 1)) == 1 && last != '\n';
  }
  std::uint64_t restart = fill_from + (cut_row ? 1 : 0);
  // Past the page holding the end of the file: a store there would land beyond
  // the end of the file without a fault, and be zeroed when the file grows.
  if (size % page_bytes != 0) restart = round_up(restart + 2, page_bytes);
  s->truncations.fetch_add(1, std::memory_order_relaxed);  // taken back if nothing was lost
  char marker[marker_bytes];
  std::size_t const marker_len = format_marker(marker);

  auto const before = s->tail.fetch_or(paused_bit);
  auto const tail = before & offset_mask;
  bool const lost = (before & closed_bit) == 0 && size < tail;
  if (lost) {
    s->epoch.fetch_add(1);
  } else {
    s->truncations.fetch_sub(1, std::memory_order_relaxed);
    restart = tail;
  }
  std::uint64_t cur = s->tail.load();
  while (!s->tail.compare_exchange_weak(cur, (lost ? restart + marker_len : restart) | (cur & closed_bit))) {}
  if (lost) at_repair_point(repair_point::resumed);
  if (detail::allocate_file(fd_, 0, cap) != 0 && ::ftruncate(fd_, static_cast<off_t>(cap)) != 0) {
    // Cannot even restore the size: no row can be stored until it grows again.
    s->capacity.store(std::min(size, restart), std::memory_order_release);
  }
  if (!lost) return false;  // only the room allocated ahead was cut
  // Written through the file, not the mapping: the helper may be the one here.
  if (size < csv_log_header.size()) (void)!::pwrite(fd_, csv_log_header.data(), csv_log_header.size(), 0);
  if (restart > fill_from) {
    char fill[page_bytes + 8];
    auto const n = static_cast<std::size_t>(restart - fill_from);
    std::memset(fill, ' ', n);
    std::size_t at = 0;
    if (cut_row) fill[at++] = '\n';
    if (n - at >= 2) {
      fill[at] = '#';
      fill[n - 1] = '\n';
    }
    (void)!::pwrite(fd_, fill, n, static_cast<off_t>(fill_from));
  }
  if (marker_len != 0) (void)!::pwrite(fd_, marker, marker_len, static_cast<off_t>(restart));
  kept = size;
  return true;
}

void csv_log_writer::start_helper() noexcept {
  populate_on_.store(true, std::memory_order_relaxed);
  helper_started_ = detail::start_quiet_thread(
      helper_thread_, "gpumem-log",
      [](void* self) -> void* {
        static_cast<csv_log_writer*>(self)->helper_loop();
        return nullptr;
      },
      this);
  if (!helper_started_) populate_on_.store(false, std::memory_order_relaxed);  // writers fault pages in themselves
}

void csv_log_writer::stop_helper() noexcept {
  populate_on_.store(false, std::memory_order_relaxed);
  if (!helper_started_) return;
  helper_started_ = false;
  // In a forked child the thread does not exist (joining would wait forever).
  if (::getpid() != owner_pid_) return;
  helper_stop_.store(true, std::memory_order_relaxed);
  wake_helper();
  pthread_join(helper_thread_, nullptr);
}

// The helper runs with every signal blocked: it must never store into the mapping
// (a SIGBUS there would kill the process). It populates with madvise (a fault is
// an error code) and repairs with pwrite.
void csv_log_writer::helper_loop() noexcept {
  shared_state* const s = shared_;
  std::uint64_t done = 0;  // [0, done) populated in this process
  std::uint32_t remaps = remaps_.load(std::memory_order_relaxed);
  std::int64_t next_poll = 0;
  bool populate_faulted = false;
  while (!helper_stop_.load(std::memory_order_relaxed)) {
    auto const seen = helper_wake_.load(std::memory_order_acquire);
    // A page of the mapping made anonymous, a fault while populating, or (polled)
    // a file cut shorter than allocated.
    auto const now = coarse_now_ns();
    if (populate_faulted || !no_overlay(overlays_.load(std::memory_order_acquire)) || now >= next_poll) {
      populate_faulted = false;
      next_poll = now + truncation_poll_ns;
      recover();
    }
    if (auto const r = remaps_.load(std::memory_order_relaxed); r != remaps) {
      remaps = r;
      done = 0;  // the windows were mapped afresh: populated pages are gone
    }
    auto const raw_tail = s->tail.load(std::memory_order_relaxed);
    if ((raw_tail & closed_bit) != 0) break;
    auto const tail = raw_tail & offset_mask;
    if (tail + page_bytes < done && done - tail > prefault_ahead) done = 0;  // the offset moved back
    auto const want = tail + prefault_ahead;
    if (want > done) {
      // Grow the file ahead too (under the growth lock, as writers would). A
      // failure (disk full) backs off; writers count what they drop.
      if (want + kept_room > s->capacity.load(std::memory_order_acquire)) (void)make_room(want + kept_room, true);
      auto const from = std::max(done, tail / page_bytes * page_bytes);
      auto const to = std::min(want, s->capacity.load(std::memory_order_acquire)) / page_bytes * page_bytes;
      if (populate_on_.load(std::memory_order_relaxed) && from < to) {
        if (populate(from, to)) {
          done = to;
        } else if (errno == EFAULT) {
          populate_faulted = true;  // past the end of the file: truncated
          continue;
        } else {
          populate_on_.store(false, std::memory_order_relaxed);  // kernel without it: writers fault pages in
        }
      }
    }
    detail::futex_wait(&helper_wake_, seen, truncation_poll_ns);
  }
}

bool csv_log_writer::populate(std::uint64_t from, std::uint64_t to) noexcept {
  while (from < to) {
    auto const k = from / window_bytes;
    auto const in = from % window_bytes;
    auto const n = std::min<std::uint64_t>(to - from, window_bytes - in);
    char* w = windows_[k].load(std::memory_order_acquire);
    if (w == nullptr) {  // the file was grown by another process (a forked child): map it here
      grow_lock lock{&shared_->grow};
      if (!map_windows_locked(from + n)) return false;
      w = windows_[k].load(std::memory_order_acquire);
    }
    // Write-faults the pages in without storing to them: rows already copied
    // there are kept. EFAULT: past the end of the file (truncated under us);
    // EINVAL: a kernel before 5.14, and the helper stops populating.
    if (::madvise(w + in, n, detail::madv_populate_write) != 0 && errno != EINTR && errno != EAGAIN) return false;
    from += n;
  }
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
  stop_helper();  // before the windows it populates go away
  finish(true);
}

void csv_log_writer::finish(bool unmap) noexcept {
  shared_state* const s = shared_;
  if (s == nullptr) return;
  // Only the opening process closes the shared log: a forked child that closes
  // its copy must not cut off its parent's rows.
  if (::getpid() == owner_pid_ && (s->tail.load() & closed_bit) == 0) {
    recover();  // a truncation not found yet (or being repaired by the helper): settled first
    // A repair's note still being written (the helper's, at exit: nothing stops
    // the helper then) comes out before the close's own.
    wait_for_notes();
    bool const incomplete = s->dropped.load(std::memory_order_relaxed) != 0 ||
                            s->truncations.load(std::memory_order_relaxed) != 0;
    // The marker and the close in one step: nothing follows the marker.
    if (!incomplete || !append_marker(0, true)) s->tail.fetch_or(closed_bit);
    auto const written = s->tail.load() & offset_mask;
    {
      grow_lock lock{&s->grow};
      if (::ftruncate(fd_, static_cast<off_t>(written)) == 0) {
        s->capacity.store(std::min(s->capacity.load(std::memory_order_relaxed), written), std::memory_order_release);
      }
    }
    if (auto const dropped = s->dropped.load(std::memory_order_relaxed); incomplete) {
      int const err = s->grow_errno.load(std::memory_order_relaxed);
      std::string why;
      if (s->truncations.load(std::memory_order_relaxed) != 0) why = "truncated by another program while in use";
      if (s->journal_cut.load(std::memory_order_relaxed)) {
        why += std::string{why.empty() ? "" : "; "} + "its journal truncated by another program";
      }
      if (err != 0) why += std::string{why.empty() ? "" : "; "} + detail::error_text(err);
      notify("the allocation log '" + path_ + "' is incomplete (" + why + "): " + std::to_string(dropped) +
             " rows dropped; its last line says so");
    }
  }
  if (!unmap) return;
  for (auto& slot : windows_) {
    if (auto* w = slot.exchange(nullptr, std::memory_order_relaxed); w != nullptr) {
      log_fault_guard::remove(w);
      ::munmap(w, window_bytes);
    }
  }
  ::close(fd_);
  fd_ = -1;
  // The state page stays mapped in a forked child's parent, and vice versa:
  // unmapping here only drops this process's view.
  final_bytes_ = s->tail.load(std::memory_order_relaxed) & offset_mask;
  final_dropped_ = s->dropped.load(std::memory_order_relaxed);
  final_truncations_ = s->truncations.load(std::memory_order_relaxed);
  ::munmap(s, sizeof(shared_state));
  shared_ = nullptr;
}

std::uint64_t csv_log_writer::bytes_written() const noexcept {
  return shared_ == nullptr ? final_bytes_ : shared_->tail.load(std::memory_order_relaxed) & offset_mask;
}

std::uint64_t csv_log_writer::dropped_rows() const noexcept {
  return shared_ == nullptr ? final_dropped_ : shared_->dropped.load(std::memory_order_relaxed);
}

std::uint32_t csv_log_writer::truncations() const noexcept {
  return shared_ == nullptr ? final_truncations_ : shared_->truncations.load(std::memory_order_relaxed);
}

}  // namespace gpumem
