// csv_log_writer: the CSV written with write(2) on an O_APPEND descriptor, fed
// by its journal (include/gpumem/csv_log_writer.hpp says what it guarantees).
#include <gpumem/csv_log_writer.hpp>
#include <gpumem/detail/file_kind.hpp>
#include <gpumem/detail/file_space.hpp>
#include <gpumem/detail/log_clock.hpp>
#include <gpumem/detail/os_thread.hpp>
#include <gpumem/detail/quiet_io.hpp>
#include <gpumem/diagnostics.hpp>
#include <gpumem/error.hpp>
#include <gpumem/row_journal.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gpumem {
namespace {

// Live writers (linked through next_live_), for the exit hook and the fork
// handler: constant-initialized and trivially destructible, so usable during exit
// whatever the order of static destructors.
pthread_mutex_t live_mutex = PTHREAD_MUTEX_INITIALIZER;
csv_log_writer* live_writers = nullptr;
pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

[[noreturn]] void throw_log_error(std::string const& path, std::string const& what) {
  throw logic_error{"gpumem: cannot write the allocation log '" + path + "': " + what};
}

// Bytes reserved on disk ahead of the file's end at a time.
constexpr std::uint64_t reserve_ahead = std::uint64_t{4} << 20;

}  // namespace

void csv_log_writer::notify_stderr(std::string_view line) noexcept {
  log_message(log_level::warn, "%.*s", static_cast<int>(line.size()), line.data());
}

void csv_log_writer::notify(std::string const& line) const noexcept {
  if (notify_ != nullptr) notify_(line);
}

csv_log_writer::csv_log_writer(std::string path, notify_fn notifier)
    : requested_path_{std::move(path)}, notify_{notifier}, owner_pid_{::getpid()} {
  open_file();
  if (detail::write_all_without_sigpipe(fd_, csv_log_header.data(), csv_log_header.size()) != 0) {
    int const err = errno;
    ::close(fd_);
    throw_log_error(path_, std::string{"cannot hold the header: "} + detail::error_text(err));
  }
  end_ = csv_log_header.size();
  try {
    journal_ = std::make_unique<row_journal>(*this);
  } catch (std::exception const& e) {  // rows are then formatted by the threads that log them
    std::string_view what = e.what();
    if (what.starts_with("gpumem: ")) what.remove_prefix(8);
    notify(std::string{what} + "; rows are written directly");
  }
  pthread_once(&hooks_once, [] {
    std::atexit(&csv_log_writer::finish_all_at_exit);
    // A forked child has the parent's descriptor but not its helper thread: it
    // writes rows directly, appended whole; a lock another thread held at the
    // fork is free in the child.
    ::pthread_atfork(nullptr, nullptr, [] {
      for (csv_log_writer* w = live_writers; w != nullptr; w = w->next_live_) {
        pthread_mutex_init(&w->mutex_, nullptr);
        if (w->journal_ != nullptr) w->journal_->forked();
      }
    });
  });
  pthread_mutex_lock(&live_mutex);
  next_live_ = live_writers;
  live_writers = this;
  pthread_mutex_unlock(&live_mutex);
}

csv_log_writer::~csv_log_writer() {
  pthread_mutex_lock(&live_mutex);
  for (csv_log_writer** p = &live_writers; *p != nullptr; p = &(*p)->next_live_) {
    if (*p == this) {
      *p = next_live_;
      break;
    }
  }
  pthread_mutex_unlock(&live_mutex);
  close();
}

// Opens the requested path, or "<path>.<pid>" when another writer holds it, and
// empties it. The lock comes before the truncation: a file in use is never cut.
void csv_log_writer::open_file() {
  auto open_locked = [](std::string const& p, bool& busy) {
    busy = false;
    int const fd = ::open(p.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
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
  if (path_ != requested_path_) {
    notify("the allocation log '" + requested_path_ + "' is in use by another process; this process (pid " +
           std::to_string(owner_pid_) + ") logs to '" + path_ + "'");
  }
}

void csv_log_writer::write(log_row const& row) noexcept {
  if (journal_ != nullptr && journal_->push(row)) return;
  char line[max_row_bytes];
  (void)append(line, format_row(line, row), 1);
}

void csv_log_writer::write(log_row const& row, std::uint64_t start_ticks, std::uint64_t end_ticks) noexcept {
  if (journal_ != nullptr && journal_->push(row, start_ticks, end_ticks)) return;
  log_row r = row;
  auto const when = detail::log_row_time(start_ticks, end_ticks != 0 ? end_ticks : start_ticks);
  r.time_ns = when.start_ns;
  r.duration_ns = end_ticks != 0 ? when.duration_ns : log_row::unmeasured;
  r.utc_offset_s = detail::local_utc_offset(r.time_ns);
  char line[max_row_bytes];
  (void)append(line, format_row(line, r), 1);
}

std::uint64_t csv_log_writer::end_locked(std::int64_t& cut_to) noexcept {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return end_;
  if (st.st_nlink == 0 && !gone_) {
    // Deleted (or its folder): rows written now reach no one. Some file systems
    // count no links at all: gone only when the path no longer names the file.
    struct stat named {};
    gone_ = ::stat(path_.c_str(), &named) != 0 || named.st_ino != st.st_ino || named.st_dev != st.st_dev;
  }
  auto const size = static_cast<std::uint64_t>(st.st_size);
  if (size >= end_) return end_ = size;  // a forked child's rows may follow ours
  // Truncated by someone else: go on at the new end, the header first if it went,
  // a cut row ended, and a line that says the earlier rows are gone.
  cut_to = st.st_size;
  truncations_.fetch_add(1, std::memory_order_relaxed);
  end_ = size;
  reserved_ = std::min(reserved_, size);  // the cut freed the blocks reserved ahead
  char last = '\n';
  if (size != 0 && ::pread(fd_, &last, 1, static_cast<off_t>(size - 1)) != 1) last = '\n';
  if (size == 0) {
    (void)write_locked(csv_log_header.data(), csv_log_header.size());
  } else if (last != '\n') {
    (void)write_locked("\n", 1);
  }
  append_marker_locked();
  return end_;
}

bool csv_log_writer::take_back_cut_write_locked(std::uint64_t at, std::size_t done) noexcept {
  // O_APPEND leaves the offset at the end of what was written.
  off_t const after = ::lseek(fd_, 0, SEEK_CUR);
  if (after < 0 || static_cast<std::uint64_t>(after) >= at + done) return false;
  return ::ftruncate(fd_, after - static_cast<off_t>(done)) == 0;  // end_locked then sees the cut
}

std::size_t csv_log_writer::write_locked(char const* data, std::size_t len) noexcept {
  std::size_t done = 0;
  while (done < len) {
    ssize_t const n = ::write(fd_, data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  end_ += done;
  return done;
}

void csv_log_writer::drop_locked(std::uint64_t rows, int err) noexcept {
  if (rows == 0) return;
  dropped_.fetch_add(rows, std::memory_order_relaxed);
  if (drop_errno_ == 0) drop_errno_ = err != 0 ? err : ENOSPC;
  if (drop_said_) return;
  drop_said_ = true;
  append_marker_locked();  // in the room kept for it
  notify("the allocation log '" + path_ + "' cannot grow (" + detail::error_text(drop_errno_) +
         "): rows are dropped from now on and counted; the log will end with a '#gpumem incomplete' line");
}

std::string csv_log_writer::loss_reason_locked() const {
  std::string why;
  if (truncations() != 0) why = "truncated by another program while in use";
  if (drop_errno_ != 0) why += std::string{why.empty() ? "" : "; "} + detail::error_text(drop_errno_);
  return why.empty() ? "rows lost" : why;
}

void csv_log_writer::append_marker_locked() noexcept {
  std::string reason;
  try {
    reason = loss_reason_locked();
  } catch (...) {  // out of memory: the marker without its reason
  }
  char line[max_marker_bytes];
  std::size_t const len = format_incomplete_marker(line, sizeof line, dropped_rows(), reason);
  if (len != 0 && len <= detail::room_under_fsize_limit(end_)) (void)write_locked(line, len);
}

bool csv_log_writer::append(char const* data, std::size_t len, std::uint64_t rows, reserved_fn on_reserved,
                            void* context) noexcept {
  pthread_mutex_lock(&mutex_);
  if (closed_) {
    pthread_mutex_unlock(&mutex_);
    return false;
  }
  std::int64_t cut_to = -1;
  std::uint64_t at = end_locked(cut_to);
  if (gone_) {
    dropped_.fetch_add(rows, std::memory_order_relaxed);
    bool const say = !gone_said_;
    gone_said_ = true;
    pthread_mutex_unlock(&mutex_);
    if (say) notify("the allocation log '" + path_ + "' was deleted while in use: rows are lost from now on");
    return false;
  }
  // Under RLIMIT_FSIZE, room for two markers stays: one now, one at the end.
  std::uint64_t const room = detail::room_under_fsize_limit(at);
  std::size_t fits = len;
  if (room < len + 2 * max_marker_bytes) {
    fits = room > 2 * max_marker_bytes ? static_cast<std::size_t>(room - 2 * max_marker_bytes) : 0;
    while (fits != 0 && data[fits - 1] != '\n') --fits;  // whole lines only
  }
  // Blocks reserved ahead of the end (the size unchanged): the writes fill them
  // instead of allocating blocks batch by batch, which halves the helper's cost a
  // row on ext4. Not under RLIMIT_FSIZE, whose room is kept for the marker.
  if (at + fits > reserved_ && room == UINT64_MAX) {
    reserved_ = ::fallocate(fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(at), reserve_ahead) == 0 ? at + reserve_ahead
                                                                                                  : UINT64_MAX;
  }
  if (on_reserved != nullptr) on_reserved(context, at);
  std::size_t done = fits == 0 ? 0 : write_locked(data, fits);
  // A cut between the size read above and the write puts the rows at the new
  // end, ahead of the header and marker the cut calls for: they are taken back
  // and written again after them.
  for (int again = 0; done != 0 && again < 3 && take_back_cut_write_locked(at, done); ++again) {
    at = end_locked(cut_to);
    if (on_reserved != nullptr) on_reserved(context, at);
    done = write_locked(data, fits);
  }
  int const err = done < fits ? (errno != 0 ? errno : EIO) : EFBIG;
  auto const stored = done == len ? rows : static_cast<std::uint64_t>(std::count(data, data + done, '\n'));
  drop_locked(rows - std::min(rows, stored), err);
  pthread_mutex_unlock(&mutex_);
  if (cut_to >= 0) {
    notify("the allocation log '" + path_ + "' was truncated by another program while in use (to " +
           std::to_string(cut_to) + " bytes): its earlier rows are gone; logging goes on after a line that says so");
  }
  return done == len;
}

void csv_log_writer::count_lost(std::uint64_t rows) noexcept { dropped_.fetch_add(rows, std::memory_order_relaxed); }

void csv_log_writer::flush() noexcept {
  if (journal_ != nullptr) journal_->drain();
}

void csv_log_writer::finish() noexcept {
  if (::getpid() != owner_pid_) return;  // a forked child: its parent ends the log
  if (journal_ != nullptr) journal_->stop_queuing();
  pthread_mutex_lock(&mutex_);
  // The blocks reserved past the end go back (a cut to the file's own size).
  if (struct stat st{}; !closed_ && reserved_ != UINT64_MAX && ::fstat(fd_, &st) == 0) {
    (void)::ftruncate(fd_, st.st_size);
    reserved_ = static_cast<std::uint64_t>(st.st_size);
  }
  bool const say = !finished_ && !closed_ && (gone_ || dropped_rows() != 0 || truncations() != 0);
  std::string why;
  if (say) {
    finished_ = true;
    std::int64_t cut_to = -1;
    (void)end_locked(cut_to);
    if (!gone_) append_marker_locked();  // a deleted log: no one could read it
    why = loss_reason_locked();
  }
  pthread_mutex_unlock(&mutex_);
  if (say && gone_) {
    notify("the allocation log '" + path_ + "' was deleted while in use: " + std::to_string(dropped_rows()) +
           " rows lost");
  } else if (say) {
    notify("the allocation log '" + path_ + "' is incomplete (" + why + "): " + std::to_string(dropped_rows()) +
           " rows dropped; its last line says so");
  }
}

void csv_log_writer::finish_all_at_exit() noexcept {
  // The descriptor stays open: rows logged later (other threads, static
  // destructors) are written directly.
  pthread_mutex_lock(&live_mutex);
  for (csv_log_writer* w = live_writers; w != nullptr; w = w->next_live_) w->finish();
  pthread_mutex_unlock(&live_mutex);
}

void csv_log_writer::close() noexcept {
  if (journal_ != nullptr) journal_->close();
  finish();
  pthread_mutex_lock(&mutex_);
  if (!closed_) {
    closed_ = true;
    ::close(fd_);
    fd_ = -1;
  }
  pthread_mutex_unlock(&mutex_);
}

}  // namespace gpumem
