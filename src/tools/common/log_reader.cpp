// Streaming CSV allocation-log reader: read(2) into a fixed buffer, lines split
// with memchr, fields with memchr, numbers with std::from_chars (no iostreams):
// millions of lines per second in a few MiB of memory.
#include "log_reader.hpp"
#include <gpumem/row_journal.hpp>
#include "call_semantics.hpp"
#include "number_parse.hpp"

#include "text_escape.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace gpumem::tools {

std::string log_diagnostic::text() const {
  return line == 0 ? fmt::format("{}: {}", file, message) : fmt::format("{}:{}: {}", file, line, message);
}

std::optional<std::int64_t> parse_time_of_day(std::string_view s) noexcept {
  // HH:MM:SS[.f...]; hours may exceed 23 only if a writer counted past midnight.
  auto two = [&](std::size_t at) -> int {
    if (at + 2 > s.size() || s[at] < '0' || s[at] > '9' || s[at + 1] < '0' || s[at + 1] > '9') return -1;
    return (s[at] - '0') * 10 + (s[at + 1] - '0');
  };
  if (s.size() < 8 || s[2] != ':' || s[5] != ':') return std::nullopt;
  int const h = two(0), m = two(3), sec = two(6);
  if (h < 0 || m < 0 || m > 59 || sec < 0 || sec > 60) return std::nullopt;
  std::int64_t ns = ((std::int64_t{h} * 60 + m) * 60 + sec) * 1'000'000'000;
  if (s.size() == 8) return ns;
  if (s[8] != '.' || s.size() == 9 || s.size() > 18) return std::nullopt;
  std::int64_t frac = 0;
  std::int64_t scale = 1'000'000'000;
  for (std::size_t i = 9; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    frac = frac * 10 + (s[i] - '0');
    scale /= 10;
  }
  return ns + frac * scale;
}

std::string format_time_of_day(std::int64_t clock_us) {
  std::int64_t const day_us = std::int64_t{86400} * 1'000'000;
  std::int64_t const t = ((clock_us % day_us) + day_us) % day_us;
  std::int64_t const s = t / 1'000'000;
  return fmt::format("{:02}:{:02}:{:02}.{:06}", s / 3600, (s / 60) % 60, s % 60, t % 1'000'000);
}

namespace {

constexpr std::int64_t ns_per_day = std::int64_t{86400} * 1'000'000'000;
constexpr std::int64_t rollover_threshold_ns = std::int64_t{3600} * 1'000'000'000;
// One read(2) fills up to this much; the buffer adds room for the longest line.
// Small enough that a report over hundreds of ranks keeps its buffers small.
constexpr std::size_t read_chunk = std::size_t{128} << 10;

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

/// The offending text, quoted and cut short so a binary blob cannot flood the report.
std::string quoted(std::string_view s) {
  constexpr std::size_t shown = 40;
  std::string out = "'" + escape_text(s.substr(0, shown)) + (s.size() > shown ? "...'" : "'");
  return out;
}

/// %p output: "0x..." or "(nil)"; a bare "0" is also a null pointer.
bool parse_pointer(std::string_view s, std::uint64_t& out) noexcept {
  if (s == "(nil)" || s == "0") {
    out = 0;
    return true;
  }
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) return parse_hex(s.substr(2), out);
  return false;
}

/// Streams are hex with 0x, or "0"/"(nil)" for the null stream; plain decimal
/// is accepted too (some writers print the handle as an integer).
bool parse_stream(std::string_view s, std::uint64_t& out) noexcept {
  if (parse_pointer(s, out)) return true;
  return parse_decimal(s, out);
}

}  // namespace

// ---- opening -------------------------------------------------------------------

log_reader::log_reader(std::string path) : path_{std::move(path)} {
  if (path_ == "-") {
    path_ = "(standard input)";
    fd_ = STDIN_FILENO;
  } else {
    complete_from_journal();
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      fail(0, fmt::format("cannot read: {}", std::strerror(errno)));
      return;
    }
    own_fd_ = true;
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      fail(0, fmt::format("cannot read: {}", std::strerror(errno)));
      return;
    }
    if (S_ISDIR(st.st_mode)) {
      fail(0, "cannot read: is a directory");
      return;
    }
  }
  capacity_ = read_chunk + max_line_bytes;
  storage_ = std::make_unique_for_overwrite<char[]>(capacity_);
  data_ = storage_.get();
  read_header();
}

// A writer that died left the last rows it queued in
// "<log>.journal": they belong at the end of the log, so add them before reading.
void log_reader::complete_from_journal() {
  journal_recovery const r = recover_journal(path_);
  if (!r.found) return;
  if (r.writer_alive) {
    warn(0, "a process is still writing this log; its last rows are queued in " + path_ + ".journal and are not read");
  } else if (!r.error.empty()) {
    warn(0, "rows queued by the process that wrote it could not be added: " + r.error);
  } else if (r.rows == 0 && r.lost == 0) {
    warn(0, "the process writing it died without exiting; every row it had queued was in the log already");
  } else {
    warn(0, fmt::format("added {} rows that the process writing it had queued in {}.journal when it died{}", r.rows,
                        path_, r.lost == 0 ? "" : fmt::format(" ({} rows it was storing are lost)", r.lost)));
  }
}

log_reader::log_reader(std::string_view text, std::string name) : path_{std::move(name)} {
  data_ = text.data();
  end_ = text.size();
  eof_ = true;
  next_nul_ = find_nul(0);
  read_header();
}

log_reader::~log_reader() {
  if (own_fd_) ::close(fd_);
}

void log_reader::fail(std::size_t line, std::string msg) { fatal_ = log_diagnostic{path_, line, std::move(msg)}; }

void log_reader::warn(std::size_t line, std::string msg) {
  ++warning_count_;
  if (warnings_.size() < max_kept_warnings) warnings_.push_back({path_, line, std::move(msg)});
}

// ---- the byte window -------------------------------------------------------------

std::size_t log_reader::find_nul(std::size_t from) const noexcept {
  void const* z = std::memchr(data_ + from, '\0', end_ - from);
  return z == nullptr ? end_ : static_cast<std::size_t>(static_cast<char const*>(z) - data_);
}

void log_reader::seek(std::size_t pos) noexcept {
  pos_ = pos;
  if (next_nul_ < pos_) next_nul_ = find_nul(pos_);
}

bool log_reader::refill() {
  if (eof_) return false;
  if (pos_ > 0) {  // keep the unread tail (part of a line) at the front
    std::memmove(storage_.get(), data_ + pos_, end_ - pos_);
    end_ -= pos_;
    pos_ = 0;
  }
  ssize_t n = 0;
  do {
    n = ::read(fd_, storage_.get() + end_, std::min(read_chunk, capacity_ - end_));
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    if (n < 0) {
      warn(line_no_, fmt::format("read error: {}; the rest of the log is lost", std::strerror(errno)));
      ended_abruptly_ = true;
    }
    eof_ = true;
    next_nul_ = find_nul(pos_);
    return false;
  }
  end_ += static_cast<std::size_t>(n);
  next_nul_ = find_nul(pos_);
  return true;
}

bool log_reader::skip_nul_run(std::size_t& count) {
  for (;;) {
    std::size_t p = pos_;
    while (p < end_ && data_[p] == '\0') ++p;
    count += p - pos_;
    pos_ = p;
    // After the header, NULs are a dead writer's room (MiBs of it, preallocated)
    // and are skipped however many. Before it they are no log's: stop at the line
    // bound, or a source of nothing but NULs (/dev/zero) is read for ever.
    if (!header_found_ && count > max_line_bytes) {
      fail(line_no_, fmt::format("more than {} KiB of NUL bytes where the header should be (not an allocation log); "
                                 "reading stopped",
                                 max_line_bytes >> 10));
      return false;
    }
    if (pos_ < end_) {
      next_nul_ = find_nul(pos_);
      return true;
    }
    if (!refill()) return false;
  }
}

bool log_reader::skip_long_line() {
  // The header is a short line: one over the bound where it should be makes no
  // log, and skipping it could mean reading for ever (no newline ever comes).
  if (!header_found_) {
    fail(line_no_, fmt::format("line longer than {} KiB where the header should be (not an allocation log); reading "
                               "stopped",
                               max_line_bytes >> 10));
    return false;
  }
  warn(line_no_, fmt::format("line longer than {} KiB (not an allocation log row); ignored", max_line_bytes >> 10));
  for (;;) {
    if (void const* nl = std::memchr(data_ + pos_, '\n', end_ - pos_)) {
      seek(static_cast<std::size_t>(static_cast<char const*>(nl) - data_) + 1);
      ++line_no_;
      return true;
    }
    pos_ = end_;
    if (!refill()) return true;
  }
}

bool log_reader::next_line(raw_line& out) {
  for (;;) {
    if (pos_ == end_ && !refill()) return false;
    out.line = line_no_;
    if (next_nul_ == pos_) {  // NULs where a line should start
      std::size_t nuls = 0;
      if (!skip_nul_run(nuls)) {  // padding to the end: a writer that never closed the log (or fatal_)
        ended_abruptly_ = true;
        return false;
      }
      warn(line_no_,
           fmt::format("{} NUL bytes skipped (room for a row that was never written: its writer died?)", nuls));
      continue;
    }
    std::size_t const limit = std::min(end_, next_nul_);
    if (void const* nl = std::memchr(data_ + pos_, '\n', limit - pos_)) {
      std::size_t const at = static_cast<std::size_t>(static_cast<char const*>(nl) - data_);
      if (at - pos_ > max_line_bytes) {  // whole in the window, still not a row
        if (!skip_long_line()) return false;
        continue;
      }
      out.text = std::string_view{data_ + pos_, at - pos_};
      out.end = line_end::newline;
      pos_ = at + 1;
      ++line_no_;
      break;
    }
    if (next_nul_ < end_) {  // the row is cut short by NULs
      torn_.assign(data_ + pos_, next_nul_ - pos_);
      pos_ = next_nul_;
      std::size_t nuls = 0;
      bool const more = skip_nul_run(nuls);
      if (fatal_) return false;
      out.text = torn_;
      out.end = more ? line_end::nul_then_more : line_end::nul_then_end;
      out.nuls = nuls;
      break;
    }
    if (eof_) {
      out.text = std::string_view{data_ + pos_, end_ - pos_};
      out.end = line_end::end_of_file;
      pos_ = end_;
      break;
    }
    if (end_ - pos_ >= max_line_bytes) {
      if (!skip_long_line()) return false;
      continue;
    }
    refill();
  }
  if (at_start_) {
    at_start_ = false;
    if (out.text.substr(0, 3) == "\xEF\xBB\xBF") out.text.remove_prefix(3);
  }
  lines_ = std::max(lines_, out.line);
  return true;
}

// ---- lines -----------------------------------------------------------------------

namespace {

/// The compressor whose magic number starts a file's first line, or nullptr.
const char* compressed_with(std::string_view first_line) noexcept {
  if (first_line.starts_with("\x1f\x8b")) return "gzip";
  if (first_line.starts_with("\x28\xb5\x2f\xfd")) return "zstd";
  if (first_line.starts_with("\xfd\x37zXZ")) return "xz";  // then a NUL, which the line reader drops
  if (first_line.starts_with("BZh") && first_line.size() > 3 && first_line[3] >= '1' && first_line[3] <= '9') {
    return "bzip2";
  }
  return nullptr;
}

}  // namespace

void log_reader::read_header() {
  raw_line l;
  std::string_view text;
  for (;;) {
    if (!next_line(l)) {
      if (!fatal_) fail(0, "empty file (no header line)");
      return;
    }
    if (l.line == 1) {
      if (const char* tool = compressed_with(l.text)) {
        fail(0, fmt::format("compressed with {}; the tools read the CSV itself: decompress it first ({} -dc {} > "
                            "log.csv), or pipe it in and name the log '-'",
                            tool, tool, path_));
        return;
      }
    }
    text = trim(l.text);
    if (text.empty()) continue;
    if (text.front() == '#') {
      read_metadata(text, l.line);
      continue;
    }
    break;
  }
  header_found_ = true;
  std::size_t count = 0;
  std::array<bool, col_unknown> seen{};
  std::string_view rest = text;
  auto const& names = log_column_names;
  while (true) {
    std::size_t const comma = rest.find(',');
    std::string_view const name = trim(rest.substr(0, comma));
    auto const known = std::find(names.begin(), names.end(), name);
    if (known != names.end()) {
      auto const id = static_cast<std::size_t>(known - names.begin());
      if (!seen[id]) {
        seen[id] = true;
        index_[id] = count;
      }
    }
    ++count;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  for (column_id const required : {col_action, col_pointer, col_size}) {
    if (!seen[required]) {
      fail(l.line,
           fmt::format("header lacks column '{}' (not an allocation log? header: {})", names[required], quoted(text)));
      return;
    }
  }
  if (!seen[col_time] && !seen[col_time_ns]) {
    fail(l.line, fmt::format("header lacks a clock column 'Time' or 'TimeNs' (header: {})", quoted(text)));
    return;
  }
  auto& c = columns_;
  c.count = count;
  c.time = seen[col_time];
  c.time_ns = seen[col_time_ns];
  c.thread = seen[col_thread];
  c.stream = seen[col_stream];
  c.device = seen[col_device];
  c.entry = seen[col_entry];
  c.duration = seen[col_duration];
  c.result = seen[col_result];
  c.reserved = seen[col_reserved];
  c.stack = seen[col_stack];
  for (std::size_t i = 0; i < col_unknown; ++i) {
    if (!seen[i]) index_[i] = no_column;
  }
  fields_.resize(count);
}

void log_reader::read_metadata(std::string_view line, std::size_t line_no) {
  constexpr std::string_view tag = "#gpumem";
  if (line.substr(0, tag.size()) != tag) return;
  std::string_view rest = trim(line.substr(tag.size()));
  constexpr std::string_view word = "incomplete";
  if (rest.substr(0, word.size()) != word) return;  // other gpumem metadata: not the reader's business
  rest.remove_prefix(word.size());
  incomplete_marker m;
  m.line = line_no;
  while (!rest.empty()) {
    if (rest.front() == ',' || rest.front() == ' ') {
      rest.remove_prefix(1);
      continue;
    }
    constexpr std::string_view reason = "reason=";
    if (rest.substr(0, reason.size()) == reason) {  // the rest of the line, commas included
      m.reason = std::string{trim(rest.substr(reason.size(), max_string_bytes * 2))};
      break;
    }
    std::size_t const comma = rest.find(',');
    std::string_view const kv = rest.substr(0, comma);
    constexpr std::string_view dropped = "dropped_rows=";
    if (std::uint64_t n = 0; kv.substr(0, dropped.size()) == dropped && parse_decimal(kv.substr(dropped.size()), n)) {
      m.dropped_rows = n;
    }
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma);
  }
  incomplete_ = std::move(m);
}

bool log_reader::next(log_event& ev) {
  if (fatal_) return false;
  raw_line l;
  while (next_line(l)) {
    std::string_view const text = trim(l.text);
    bool const is_metadata = !text.empty() && text.front() == '#';
    switch (l.end) {
      case line_end::newline: break;
      case line_end::nul_then_more:
        if (!text.empty()) {
          warn(l.line, fmt::format("torn row (cut short by {} NUL bytes: its writer died mid-row?): {}; ignored",
                                   l.nuls, quoted(text)));
        }
        continue;
      case line_end::end_of_file:
      case line_end::nul_then_end:
        ended_abruptly_ = true;
        if (is_metadata) break;  // a marker written last, without its newline, still counts
        if (!text.empty()) {
          warn(l.line, fmt::format("truncated last line (no newline at end of file): {}; ignored", quoted(text)));
        }
        continue;
    }
    if (text.empty()) continue;
    if (is_metadata) {
      read_metadata(text, l.line);
      continue;
    }
    if (read_row(l.text, l.line, ev)) {
      ev.index = events_++;
      return true;
    }
  }
  return false;
}

std::uint16_t log_reader::intern(std::string_view s, std::uint16_t& last) {
  if (s.empty()) return 0;
  if (s.size() > max_string_bytes) s = s.substr(0, max_string_bytes);
  if (strings_[last] == s) return last;
  if (auto const it = string_ids_.find(s); it != string_ids_.end()) return last = it->second;
  if (strings_.size() >= max_strings) return 0;  // absurdly many distinct names: keep the events
  auto const id = static_cast<std::uint16_t>(strings_.size());
  strings_.emplace_back(s);
  string_ids_.emplace(strings_.back(), id);
  return last = id;
}

bool log_reader::read_row(std::string_view line, std::size_t line_no, log_event& ev) {
  std::size_t n = 0;
  std::size_t start = 0;
  while (true) {
    char const* comma = static_cast<char const*>(std::memchr(line.data() + start, ',', line.size() - start));
    std::size_t const end = comma ? static_cast<std::size_t>(comma - line.data()) : line.size();
    if (n < fields_.size()) fields_[n] = trim(line.substr(start, end - start));
    ++n;
    if (!comma) break;
    start = end + 1;
  }
  if (n != fields_.size()) {
    warn(line_no, fmt::format("expected {} fields, found {}", fields_.size(), n));
    return false;
  }

  ev = log_event{};
  ev.line = static_cast<std::uint32_t>(std::min<std::size_t>(line_no, UINT32_MAX));
  std::string_view const act = field(col_action);
  if (auto const a = parse_action(act)) {
    ev.action = *a;
  } else {
    warn(line_no, fmt::format("unknown action {} (expected allocate, allocate failure or free)", quoted(act)));
    return false;
  }
  if (!parse_pointer(field(col_pointer), ev.pointer)) {
    warn(line_no, fmt::format("bad pointer {} (expected 0x... or (nil))", quoted(field(col_pointer))));
    return false;
  }
  if (!parse_decimal(field(col_size), ev.size)) {
    warn(line_no, fmt::format("bad size {} (expected a decimal byte count)", quoted(field(col_size))));
    return false;
  }
  if (index_[col_thread] != no_column) {
    std::string_view const t = field(col_thread);
    if (!parse_decimal(t, ev.thread_id) && !parse_pointer(t, ev.thread_id)) {
      warn(line_no, fmt::format("bad thread id {}", quoted(t)));
      return false;
    }
  }
  if (index_[col_stream] != no_column && !parse_stream(field(col_stream), ev.stream)) {
    warn(line_no, fmt::format("bad stream {}", quoted(field(col_stream))));
    return false;
  }
  if (index_[col_device] != no_column) {
    if (!parse_decimal(field(col_device), ev.device) || ev.device < 0 || ev.device > 32767) {
      warn(line_no, fmt::format("bad device {}", quoted(field(col_device))));
      return false;
    }
  }
  if (index_[col_time] != no_column) {
    auto const tod = parse_time_of_day(field(col_time));
    if (!tod) {
      warn(line_no, fmt::format("bad time {} (expected HH:MM:SS.ffffff)", quoted(field(col_time))));
      return false;
    }
    ev.clock_us = *tod / 1000;
    if (index_[col_time_ns] == no_column) {
      if (have_clock_ && *tod + rollover_threshold_ns < last_tod_ns_) day_ns_ += ns_per_day;
      have_clock_ = true;
      last_tod_ns_ = *tod;
      ev.time_ns = day_ns_ + *tod;
    }
  }
  if (index_[col_time_ns] != no_column && !parse_decimal(field(col_time_ns), ev.time_ns)) {
    warn(line_no, fmt::format("bad TimeNs {}", quoted(field(col_time_ns))));
    return false;
  }
  if (index_[col_duration] != no_column) {
    std::string_view const d = field(col_duration);  // empty: not measured
    if (!d.empty() && (!parse_decimal(d, ev.duration_ns) || ev.duration_ns == log_row::unmeasured)) {
      warn(line_no, fmt::format("bad DurationNs {}", quoted(d)));
      return false;
    }
  }
  if (index_[col_reserved] != no_column) {
    std::string_view const r = field(col_reserved);
    if (!r.empty() && (!parse_decimal(r, ev.reserved) || ev.reserved < 0)) {
      warn(line_no, fmt::format("bad Reserved {}", quoted(r)));
      return false;
    }
  }
  if (index_[col_stack] != no_column) {
    std::string_view const st = field(col_stack);
    if (!st.empty() && !parse_hex(st, ev.stack)) {
      warn(line_no, fmt::format("bad Stack {} (expected a hex stack id)", quoted(st)));
      return false;
    }
  }
  if (index_[col_entry] != no_column) {
    ev.entry_id = intern(field(col_entry), last_entry_);
    // Rows repeat their entry point: classify a text once per change, not per row.
    if (ev.entry_id != memory_memo_id_ || ev.entry_id == 0) {
      memory_memo_id_ = ev.entry_id;
      memory_memo_ = memory_kind_of_entry(field(col_entry));
    }
    ev.memory = memory_memo_;
  }
  if (index_[col_result] != no_column) {
    std::string_view const result = field(col_result);
    ev.result_id = intern(result, last_result_);
    ev.refused = ev.action == log_action::free && !result.empty() && result != "CUDA_SUCCESS" &&
                 result != "cudaSuccess";
  }
  if (ev.memory == memory_kind::managed || !managed_live_.empty()) track_managed(ev);
  return true;
}

void log_reader::track_managed(log_event& ev) {
  if (ev.pointer == 0) return;
  if (ev.memory == memory_kind::managed) {
    if (ev.action == log_action::allocate) managed_live_.insert(ev.pointer);
    return;
  }
  if (ev.memory != memory_kind::device) return;
  if (ev.action == log_action::allocate) {
    managed_live_.erase(ev.pointer);  // its managed free was lost: the address is device memory now
    return;
  }
  if (ev.action != log_action::free) return;
  auto const it = managed_live_.find(ev.pointer);
  if (it == managed_live_.end()) return;
  ev.memory = memory_kind::managed;
  if (!ev.refused) managed_live_.erase(it);  // a refused free leaves the memory allocated
}

log_file_info log_reader::info() const {
  return log_file_info{path_, columns_, lines_, strings(), warnings_, warning_count_, incomplete_, ended_abruptly_};
}

parsed_log parse_log(std::string_view text, std::string name) {
  log_reader r{text, std::move(name)};
  parsed_log log;
  log.readable = r.readable();
  log.fatal = r.fatal();
  log_event ev;
  while (r.next(ev)) log.events.push_back(ev);
  static_cast<log_file_info&>(log) = r.info();
  return log;
}

}  // namespace gpumem::tools
