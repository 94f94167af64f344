// row_journal: log rows as 64-byte records in a file-backed ring, formatted into
// the CSV log by a helper thread.
//
// Ring protocol. `head` counts records reserved, `tail` records formatted (or
// given up on); both live in process memory. A writer takes index i = head++,
// waits until i < tail + slots (its slot's previous record is formatted), stores
// the fields, then the stamp (lap of i and thread id) with release: a stamp
// whose lap matches the index is the record's "published" mark. Only the holder
// of drain_mutex_ formats, in index order, and moves `tail`, copying it to the
// file's header. The file's zero-filled start (lap 0) is never a valid lap, so
// recovery finds the records left by their stamps.
//
// Crash recovery needs to know which records already reached the CSV. The
// formatter notes the batch it copies (first record, count, bytes, and the
// offset the log gave it) in the header before the copy and moves `tail` after
// it; a batch noted but not followed by its `tail` is formatted again into its
// place. The bytes come out the same: a row's length does not depend on the time
// zone (the Time column is fixed-width), and the tick anchor the batch was
// formatted with is in the header (stored before the batch is noted).

#include <gpumem/csv_log_writer.hpp>
#include <gpumem/detail/file_space.hpp>
#include <gpumem/detail/log_clock.hpp>
#include <gpumem/detail/os_thread.hpp>
#include <gpumem/detail/quiet_io.hpp>
#include <gpumem/error.hpp>
#include <gpumem/row_journal.hpp>

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <new>
#include <vector>

#include <sched.h>

namespace gpumem {

namespace {

constexpr char journal_magic[8] = {'G', 'P', 'U', 'M', 'J', 'R', 'N', '3'};
constexpr std::uint32_t header_bytes = 20480;            // 5 pages: counters, then the name table
constexpr std::size_t name_bytes = 64;                   // a name and its NUL
constexpr std::size_t max_names = 255;                   // indices 1..255; 0 = none
constexpr std::uint8_t no_index = 0xff;                  // name_index(): the table is full
constexpr std::size_t inline_names = 4;                  // names name_index() looks at inline
constexpr std::size_t batch_buffer = 32768;              // rows formatted per copy into the log
constexpr std::int64_t publish_wait_ns = 1'000'000'000;  // a reserved record not stored for this long is given up
constexpr std::uint64_t wake_every = row_journal::ring_slots / 8;
constexpr std::int64_t max_idle_ms = 64;           // the helper looks at least this often
static_assert(max_idle_ms < 1000);                 // its futex wait takes the timeout in tv_nsec alone
constexpr std::uint64_t max_thread = 0xffff'ffff;  // a stamp holds 32 bits of the thread id
// record::action's top bit: time_ns and duration_ns hold log_ticks() values.
constexpr std::uint8_t action_in_ticks = 0x80;
constexpr std::uint32_t unmeasured_duration = 0xffff'ffff;  // record::duration_ns of log_row::unmeasured
constexpr std::uint64_t prefetch_distance = 8;              // records ahead of the one stored

// PREFETCHW (a NOP on x86-64 CPUs without it).
inline void prefetch_for_write(void const* p) noexcept {
#if defined(__x86_64__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<char const*>(p)));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

constexpr std::uint64_t lap_of(std::uint64_t index) noexcept {
  return ((index / row_journal::ring_slots) + 1) & 0xffff'ffffU;
}

using detail::error_text;

std::atomic<bool> hold_rows{false};  // row_journal::hold_rows_for_testing

}  // namespace

struct row_journal::file_header {
  char magic[8];
  std::uint32_t header_size;
  std::uint32_t record_size;
  std::uint64_t slots;
  std::int32_t owner_pid;
  /// The ring's tail, copied here by the drainer (recovery finds the head by the
  /// records' stamps).
  alignas(64) std::atomic<std::uint64_t> tail;
  /// The batch being copied into the log (drainer only): records
  /// [batch_first, batch_first + batch_count), batch_bytes of text at batch_offset.
  /// batch_count is stored last (and cleared after `tail` moved): 0 = none.
  std::atomic<std::uint64_t> batch_first;
  std::atomic<std::uint64_t> batch_bytes;
  std::atomic<std::uint64_t> batch_offset;
  std::atomic<std::uint64_t> batch_count;
  std::atomic<std::uint32_t> names;  ///< entries of name_text in use
  /// The conversion of the rows formatted last (and, after a crash, of those
  /// left): anchors[anchor_current & 1]; the other slot is written, then
  /// anchor_current moves, so a crash leaves a whole one.
  struct anchor_slot {
    std::atomic<std::uint64_t> ticks;
    std::atomic<std::int64_t> real_ns;
    std::atomic<std::uint64_t> mult;
  };
  alignas(64) anchor_slot anchors[2];
  std::atomic<std::uint32_t> anchor_current;
  alignas(64) char name_text[max_names][name_bytes];
};
static_assert(sizeof(row_journal::file_header) <= header_bytes);
static_assert(offsetof(row_journal::file_header, owner_pid) == 24);  // recover_journal reads it before mapping
// Tests play crashes by writing these (row_journal_test.cpp).
static_assert(offsetof(row_journal::file_header, batch_first) == 72);
static_assert(offsetof(row_journal::file_header, batch_count) == 96);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

struct row_journal::record {
  std::atomic<std::uint64_t> stamp;  ///< lap << 32 | thread id; stored last
  std::int64_t time_ns;
  std::uint64_t pointer;
  std::uint64_t size;
  std::uint64_t stream;
  std::int64_t reserved;
  std::uint64_t stack;
  std::uint32_t duration_ns;
  std::int8_t device;
  std::uint8_t action;  ///< log_action, | action_in_ticks
  std::uint8_t entry;   ///< name index; 0: the action's name
  std::uint8_t result;  ///< name index; 0: CUDA_SUCCESS
};
static_assert(sizeof(row_journal::record) == 64);

namespace {

// The row a record stands for; `names` gives a name index's text, `anchor`
// converts a record in ticks.
template <class Names>
log_row row_of(row_journal::record const& r, std::uint64_t stamp, Names const& names,
               detail::tick_anchor const& anchor) noexcept {
  bool const measured = r.duration_ns != unmeasured_duration;
  detail::row_time when{r.time_ns, r.duration_ns};
  if ((r.action & action_in_ticks) != 0) {
    when = detail::to_row_time(anchor, static_cast<std::uint64_t>(r.time_ns), measured ? r.duration_ns : 0);
  }
  if (!measured) when.duration_ns = log_row::unmeasured;
  return log_row{.thread_id = stamp & 0xffff'ffffU,
                 .time_ns = when.start_ns,
                 .utc_offset_s = detail::local_utc_offset(when.start_ns),
                 .action = static_cast<log_action>(r.action & ~action_in_ticks),
                 .pointer = r.pointer,
                 .size = r.size,
                 .stream = r.stream,
                 .device = r.device,
                 .entry = names(r.entry),
                 .duration_ns = when.duration_ns,
                 .result = names(r.result),
                 .reserved = r.reserved,
                 .stack = r.stack};
}

}  // namespace

row_journal::row_journal(csv_log_writer& log) : log_{&log}, path_{log.path() + ".journal"} {
  auto fail = [this](char const* what, int err) {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(path_.c_str());
    }
    throw logic_error{std::string{"gpumem: cannot "} + what + " the log's journal '" + path_ + "': " + error_text(err)};
  };
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("create", errno);
  mapped_bytes_ = header_bytes + ring_slots * sizeof(record);
  // Allocated now: a full disk (or RLIMIT_FSIZE) shows here, not as SIGBUS (or
  // SIGXFSZ) at a store later.
  if (int const r = detail::allocate_file(fd_, 0, mapped_bytes_); r != 0) fail("allocate", r);
  void* p = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) fail("map", errno);
  // Writable now: the calling threads' stores to the ring take no page fault
  // (on the development VM a first-lap row cost 44-49 ns without this, 18-19 with it).
  detail::populate_for_writing(p, mapped_bytes_);
  header_ = new (p) file_header{};
  std::memcpy(header_->magic, journal_magic, sizeof journal_magic);
  header_->header_size = header_bytes;
  header_->record_size = sizeof(record);
  header_->slots = ring_slots;
  header_->owner_pid = ::getpid();
  (void)publish_anchor();  // recovery has one even if no row was ever formatted
  ring_ = reinterpret_cast<record*>(static_cast<char*>(p) + header_bytes);
  if (hold_rows.load(std::memory_order_relaxed)) return;
  helper_started_ = detail::start_quiet_thread(
      helper_thread_, "gpumem-logfmt",
      [](void* self) -> void* {
        static_cast<row_journal*>(self)->helper_loop();
        return nullptr;
      },
      this);
  if (!helper_started_) closed_.store(1, std::memory_order_relaxed);  // no formatter: rows are written directly
}

row_journal::~row_journal() { close(); }

void row_journal::hold_rows_for_testing(bool on) noexcept { hold_rows.store(on, std::memory_order_relaxed); }

// Inline into push_record: a row's two names are almost always among the first
// few entries (the program's few entry points; nullptr for CUDA_SUCCESS).
[[gnu::always_inline]] inline std::uint8_t row_journal::name_index(const char* name) noexcept {
  if (name == nullptr) return 0;
  for (std::size_t i = 1; i <= inline_names; ++i) {
    const char* const n = names_[i].load(std::memory_order_acquire);
    if (n == name) return static_cast<std::uint8_t>(i);
    if (n == nullptr) break;
  }
  return add_name(name);
}

std::uint8_t row_journal::add_name(const char* name) noexcept {
  for (std::size_t i = inline_names + 1; i <= max_names; ++i) {
    const char* const n = names_[i].load(std::memory_order_acquire);
    if (n == name) return static_cast<std::uint8_t>(i);
    if (n == nullptr) break;
  }
  pthread_mutex_lock(&names_mutex_);
  std::uint8_t index = no_index;
  std::size_t i = 1;
  for (; i <= max_names; ++i) {
    const char* const n = names_[i].load(std::memory_order_relaxed);
    if (n == name) {
      index = static_cast<std::uint8_t>(i);
      break;
    }
    if (n == nullptr) break;
  }
  if (index == no_index && i < max_names && std::strlen(name) < name_bytes) {
    // The text first (for recovery), then the pointer that makes it usable.
    std::strncpy(header_->name_text[i - 1], name, name_bytes - 1);
    header_->names.store(static_cast<std::uint32_t>(i), std::memory_order_release);
    names_[i].store(name, std::memory_order_release);
    index = static_cast<std::uint8_t>(i);
  }
  pthread_mutex_unlock(&names_mutex_);
  return index;
}

bool row_journal::push(log_row const& row) noexcept {
  if (row.duration_ns == log_row::unmeasured) return push_record(row, row.time_ns, unmeasured_duration, 0);
  if (row.duration_ns >= unmeasured_duration) [[unlikely]]
    return false;
  return push_record(row, row.time_ns, static_cast<std::uint32_t>(row.duration_ns), 0);
}

bool row_journal::push(log_row const& row, std::uint64_t start_ticks, std::uint64_t end_ticks) noexcept {
  if (end_ticks == 0) {
    return push_record(row, static_cast<std::int64_t>(start_ticks), unmeasured_duration, action_in_ticks);
  }
  // Backwards (another core's counter, a hair behind): duration 0, as log_row_time gives.
  std::uint64_t const elapsed = end_ticks > start_ticks ? end_ticks - start_ticks : 0;
  if (elapsed >= unmeasured_duration) [[unlikely]]
    return false;
  return push_record(row, static_cast<std::int64_t>(start_ticks), static_cast<std::uint32_t>(elapsed), action_in_ticks);
}

bool row_journal::push_record(log_row const& row, std::int64_t time, std::uint32_t duration,
                              std::uint8_t flags) noexcept {
  if (closed_.load(std::memory_order_relaxed) != 0) [[unlikely]]
    return false;
  if (row.device < INT8_MIN || row.device > INT8_MAX || row.thread_id >= max_thread) [[unlikely]] { return false; }
  std::uint8_t const entry = name_index(row.entry);
  std::uint8_t const result = name_index(row.result);
  if (entry == no_index || result == no_index) [[unlikely]]
    return false;

  std::uint64_t const i = head_.fetch_add(1, std::memory_order_relaxed);
  // (Compared so, not as i - tail: `tail` passes i when the formatter gave up on
  // this record meanwhile.)
  if (i >= tail_.load(std::memory_order_acquire) + ring_slots && !wait_for_slot(i)) [[unlikely]] { return false; }
  record& r = ring_[i & (ring_slots - 1)];
  // The slot a few records ahead, fetched for writing now: its line was last read by
  // the formatter a lap ago, so a store to it would miss, and the next locked
  // instruction (the pool's, or the next row's fetch_add) would wait for that miss.
  prefetch_for_write(&ring_[(i + prefetch_distance) & (ring_slots - 1)]);
  r.time_ns = time;
  r.pointer = row.pointer;
  r.size = row.size;
  r.stream = row.stream;
  r.reserved = row.reserved;
  r.stack = row.stack;
  r.duration_ns = duration;
  r.device = static_cast<std::int8_t>(row.device);
  r.action = static_cast<std::uint8_t>(static_cast<std::uint8_t>(row.action) | flags);
  r.entry = entry;
  r.result = result;
  r.stamp.store(lap_of(i) << 32U | row.thread_id, std::memory_order_release);
  if ((i & (wake_every - 1)) == 0) [[unlikely]]
    wake_helper();
  // Stopped (at exit) while this record was being stored: the final drain may
  // have passed it; format it now.
  if (closed_.load() != 0) [[unlikely]]
    drain_until(i + 1);
  return true;
}

bool row_journal::wait_for_slot(std::uint64_t i) noexcept {
  // Full: format the oldest records here until this one has a slot. Bounded:
  // the formatter gives up on a record its writer never stores.
  std::uint64_t t = 0;
  while (i >= (t = tail_.load(std::memory_order_acquire)) + ring_slots) {
    if (pthread_mutex_trylock(&drain_mutex_) == 0) {
      (void)drain_batch_locked();
      pthread_mutex_unlock(&drain_mutex_);
    } else {
      ::sched_yield();
    }
  }
  return t <= i;
}

bool row_journal::drain_batch_locked() noexcept {
  std::uint64_t const t = tail_.load(std::memory_order_relaxed);
  std::uint64_t const head = head_.load(std::memory_order_acquire);
  if (t == head || header_ == nullptr) return false;
  auto const names = [this](std::uint8_t k) noexcept { return names_[k].load(std::memory_order_acquire); };
  // The whole batch with one anchor, in the header before the batch is noted:
  // recovery formats a batch cut short by a crash again, byte for byte.
  detail::tick_anchor const anchor = publish_anchor();
  char buf[batch_buffer];
  std::size_t len = 0;
  std::uint64_t n = 0;
  while (t + n < head && len + max_row_bytes <= sizeof buf) {
    std::uint64_t const k = t + n;
    record const& r = ring_[k & (ring_slots - 1)];
    std::uint64_t stamp = r.stamp.load(std::memory_order_acquire);
    if (stamp >> 32U != lap_of(k)) {
      if (n != 0) break;  // format what is ready; this one comes next time
      // Reserved, not stored yet: its writer is between the two. Wait, but not
      // forever: a writer that never comes back must not stop the log.
      auto const give_up = detail::monotonic_ns() + publish_wait_ns;
      while ((stamp = r.stamp.load(std::memory_order_acquire)) >> 32U != lap_of(k) &&
             detail::monotonic_ns() < give_up) {
        ::sched_yield();
      }
      if (stamp >> 32U != lap_of(k)) {
        tail_.store(t + 1, std::memory_order_release);
        header_->tail.store(t + 1, std::memory_order_release);
        log_->count_lost(1);
        return true;
      }
    }
    ++n;
    len += format_row(buf + len, row_of(r, stamp, names, anchor));
  }
  file_header* const h = header_;
  h->batch_first.store(t, std::memory_order_relaxed);
  h->batch_bytes.store(len, std::memory_order_relaxed);
  struct note {
    file_header* h;
    std::uint64_t n;
  } noted{h, n};
  (void)log_->append(
      buf, len, n,
      [](void* context, std::uint64_t offset) noexcept {
        auto* b = static_cast<note*>(context);
        b->h->batch_offset.store(offset, std::memory_order_relaxed);
        b->h->batch_count.store(b->n, std::memory_order_release);
      },
      &noted);
  tail_.store(t + n, std::memory_order_release);
  h->tail.store(t + n, std::memory_order_release);
  h->batch_count.store(0, std::memory_order_release);
  return true;
}

detail::tick_anchor row_journal::publish_anchor() noexcept {
  detail::tick_anchor const a = detail::log_tick_anchor();
  // Formatters take turns (the helper, callers finding the ring full), each with
  // its own thread's anchor: keep the journal's while it is as recent, so rows
  // change anchor (and may step by the anchors' difference, tens of ns) only
  // when a newer one comes.
  if (anchor_.mult != 0 && anchor_.ticks >= a.ticks) return anchor_;
  anchor_ = a;
  file_header* const h = header_;
  std::uint32_t const current = h->anchor_current.load(std::memory_order_relaxed);
  auto& next = h->anchors[(current + 1) & 1U];
  next.ticks.store(a.ticks, std::memory_order_relaxed);
  next.real_ns.store(a.real_ns, std::memory_order_relaxed);
  next.mult.store(a.mult, std::memory_order_relaxed);
  h->anchor_current.store(current + 1, std::memory_order_release);
  return a;
}

void row_journal::drain_until(std::uint64_t until) noexcept {
  pthread_mutex_lock(&drain_mutex_);
  while (tail_.load(std::memory_order_relaxed) < until && drain_batch_locked()) {}
  pthread_mutex_unlock(&drain_mutex_);
}

void row_journal::drain() noexcept { drain_until(head_.load(std::memory_order_acquire)); }

void row_journal::wake_helper() noexcept {
  helper_wake_.fetch_add(1, std::memory_order_release);
  ::syscall(SYS_futex, &helper_wake_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

void row_journal::helper_loop() noexcept {
  std::int64_t idle_ms = 1;
  while (!helper_stop_.load(std::memory_order_acquire)) {
    auto const seen = helper_wake_.load(std::memory_order_acquire);
    bool drained = false;
    for (;;) {  // a batch at a time: a caller with a full ring may take a turn
      pthread_mutex_lock(&drain_mutex_);
      bool const more = drain_batch_locked();
      pthread_mutex_unlock(&drain_mutex_);
      if (!more) break;
      drained = true;
    }
    // Quick to look again while rows flow, rarely while the program logs nothing.
    idle_ms = drained ? 1 : std::min<std::int64_t>(idle_ms * 2, max_idle_ms);
    timespec const wait{0, static_cast<long>(idle_ms * 1'000'000)};  // futex: sleeps while helper_wake_ == seen
    ::syscall(SYS_futex, &helper_wake_, FUTEX_WAIT_PRIVATE, seen, &wait, nullptr, 0);
  }
}

void row_journal::stop_queuing() noexcept {
  closed_.store(1);
  drain_until(head_.load());
  helper_stop_.store(true, std::memory_order_release);
  wake_helper();
  // Everything queued is in the log now (a row pushed meanwhile is formatted by
  // its own thread): nothing is left for recovery.
  if (header_ != nullptr && ::getpid() == header_->owner_pid) ::unlink(path_.c_str());
}

void row_journal::forked() noexcept {
  closed_.store(1, std::memory_order_relaxed);
  helper_started_ = false;
  pthread_mutex_init(&drain_mutex_, nullptr);
  pthread_mutex_init(&names_mutex_, nullptr);
}

void row_journal::close() noexcept {
  if (header_ == nullptr) return;
  bool const owner = ::getpid() == header_->owner_pid;
  if (owner) {
    stop_queuing();
    if (helper_started_) {
      pthread_join(helper_thread_, nullptr);
      helper_started_ = false;
    }
  }
  pthread_mutex_lock(&drain_mutex_);
  ::munmap(header_, mapped_bytes_);
  header_ = nullptr;
  ring_ = nullptr;
  pthread_mutex_unlock(&drain_mutex_);
  ::close(fd_);
  fd_ = -1;
}

// ---------------------------------------------------------------------------
// Recovery: the rows a dead writer's journal still held.

namespace {

class fd_guard {
 public:
  explicit fd_guard(int fd) noexcept : fd_{fd} {}
  ~fd_guard() {
    if (fd_ >= 0) ::close(fd_);
  }
  fd_guard(fd_guard const&) = delete;
  fd_guard& operator=(fd_guard const&) = delete;
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

constexpr off_t owner_pid_at = 24;  // file_header::owner_pid

}  // namespace

journal_recovery recover_journal(std::string const& log_path) noexcept {
  journal_recovery out;
  try {
    std::string const jpath = log_path + ".journal";
    fd_guard jfd{::open(jpath.c_str(), O_RDONLY | O_CLOEXEC)};
    if (jfd.get() < 0) {
      if (errno != ENOENT) out.error = "cannot open '" + jpath + "': " + error_text(errno);
      out.found = errno != ENOENT;
      return out;
    }
    out.found = true;
    fd_guard lfd{::open(log_path.c_str(), O_RDWR | O_CLOEXEC)};
    if (lfd.get() < 0) {
      out.error = "cannot open '" + log_path + "': " + error_text(errno);
      return out;
    }
    // The writer holds this lock as long as it (or a forked child sharing its
    // descriptor) lives. On a file system without flock the journal's process
    // alone tells.
    if (::flock(lfd.get(), LOCK_EX | LOCK_NB) != 0) {
      bool const busy = errno == EWOULDBLOCK;
      std::int32_t owner = 0;
      bool const known = ::pread(jfd.get(), &owner, sizeof owner, owner_pid_at) == sizeof owner && owner > 0;
      if (busy || !known || ::kill(owner, 0) == 0 || errno != ESRCH) {
        out.writer_alive = true;
        return out;
      }
    }
    struct stat js {};
    struct stat ls {};
    if (::fstat(jfd.get(), &js) != 0 || ::fstat(lfd.get(), &ls) != 0) {
      out.error = std::string{"cannot read the files' sizes: "} + error_text(errno);
      return out;
    }
    auto const want = header_bytes + row_journal::ring_slots * sizeof(row_journal::record);
    // Read, not mapped: a cut meanwhile shortens the read instead of raising SIGBUS.
    struct alignas(64) line {
      char bytes[64];
    };
    std::vector<line> buffer(want / sizeof(line));
    char* const p = buffer.front().bytes;
    std::uint64_t have = 0;  // bytes of the journal read
    while (have < want) {
      ssize_t const n = ::pread(jfd.get(), p + have, want - have, static_cast<off_t>(have));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        out.error = "cannot read '" + jpath + "': " + error_text(errno);
        return out;
      }
      if (n == 0) break;
      have += static_cast<std::uint64_t>(n);
    }
    auto const* h = reinterpret_cast<row_journal::file_header const*>(p);
    bool const ours = have >= sizeof journal_magic && std::memcmp(h->magic, journal_magic, sizeof journal_magic) == 0 &&
                      static_cast<std::uint64_t>(js.st_size) <= want;
    if (!ours || (have == want && (h->header_size != header_bytes || h->record_size != sizeof(row_journal::record) ||
                                   h->slots != row_journal::ring_slots))) {
      out.error = "'" + jpath + "' is not a journal of this gpumem version";
      return out;
    }
    if (have != want) {
      out.error = "'" + jpath + "' was cut short by another program (" + std::to_string(have) + " of " +
                  std::to_string(want) + " bytes): the rows queued in it are lost";
      return out;
    }
    auto const* ring = reinterpret_cast<row_journal::record const*>(p + header_bytes);
    std::uint32_t const name_count = std::min<std::uint32_t>(h->names.load(), max_names);
    auto const names = [&](std::uint8_t k) noexcept -> const char* {
      if (k == 0 || k > name_count) return nullptr;  // a name never stored: the action's / CUDA_SUCCESS
      return h->name_text[k - 1];
    };
    std::uint64_t tail = h->tail.load();
    auto const stored = [&](std::uint64_t i) {  // with its lap's stamp
      return ring[i & (row_journal::ring_slots - 1)].stamp.load() >> 32U == lap_of(i);
    };
    // The records left: up to the last stored one (a record reserved but never
    // stored counts as lost only if a later one was stored).
    std::uint64_t head = tail;
    for (std::uint64_t i = tail; i < tail + row_journal::ring_slots; ++i) {
      if (stored(i)) head = i + 1;
    }
    auto end = static_cast<std::uint64_t>(ls.st_size);
    std::string text;
    // The anchor the last batch was formatted with: the same bytes for a batch
    // formatted again; for later rows, times within the clock's rate error of
    // the writer's (they were queued within about 64 ms of it).
    auto const& in_header = h->anchors[h->anchor_current.load() & 1U];
    detail::tick_anchor const anchor{in_header.ticks.load(), in_header.real_ns.load(), in_header.mult.load()};
    // False: lost.
    auto format = [&](std::uint64_t i) {
      if (!stored(i)) return false;
      auto const& r = ring[i & (row_journal::ring_slots - 1)];
      if ((r.action & action_in_ticks) != 0 && anchor.mult == 0) return false;  // no conversion: a damaged header
      char row[max_row_bytes];
      text.append(row, format_row(row, row_of(r, r.stamp.load(), names, anchor)));
      return true;
    };
    // A batch the formatter was copying when the process died: into its place.
    if (std::uint64_t const n = h->batch_count.load(); n != 0 && h->batch_first.load() == tail) {
      bool whole = true;
      for (std::uint64_t i = tail; i < tail + n; ++i) whole &= format(i);
      auto const offset = h->batch_offset.load();
      // Into its place only if what the log holds there is the start of it (the
      // batch cut short), never over rows another writer appended there.
      auto const size = static_cast<std::uint64_t>(ls.st_size);
      std::string there(offset <= size ? std::min<std::uint64_t>(size - offset, text.size()) : 0, '\0');
      bool const in_place = offset <= size &&
                            ::pread(lfd.get(), there.data(), there.size(), static_cast<off_t>(offset)) ==
                                static_cast<ssize_t>(there.size()) &&
                            text.compare(0, there.size(), there) == 0;
      if (whole && text.size() == h->batch_bytes.load() && in_place) {
        if (!detail::pwrite_all(lfd.get(), text.data(), text.size(), offset)) {
          out.error = "cannot write '" + log_path + "': " + error_text(errno);
          return out;
        }
        end = std::max(end, offset + text.size());
        out.rows += n;
        tail += n;
      }  // else formatted again below, after the log's end
      text.clear();
    }
    if (end > 0) {  // a row cut short when the process died: end it (readers skip it)
      char last = '\n';
      if (::pread(lfd.get(), &last, 1, static_cast<off_t>(end - 1)) == 1 && last != '\n') text.push_back('\n');
    }
    for (std::uint64_t i = tail; i < head; ++i) ++(format(i) ? out.rows : out.lost);
    if (out.lost != 0) {
      char marker[max_marker_bytes];
      text.append(marker, format_incomplete_marker(marker, sizeof marker, out.lost,
                                                   "the process died while storing these rows"));
    }
    if (!detail::pwrite_all(lfd.get(), text.data(), text.size(), end) ||
        ::ftruncate(lfd.get(), static_cast<off_t>(end + text.size())) != 0) {
      out.error = "cannot write '" + log_path + "': " + error_text(errno);
      return out;
    }
    ::unlink(jpath.c_str());
    return out;
  } catch (std::exception const& e) {
    out.error = e.what();
    return out;
  }
}

}  // namespace gpumem
