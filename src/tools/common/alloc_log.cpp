// CSV allocation-log reader: one pass over the file held in memory, fields split
// with memchr and numbers parsed with std::from_chars (no iostreams per field):
// millions of lines per second.
#include <gpumem/tools/alloc_log.hpp>

#include <fmt/format.h>

#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>

namespace gpumem::tools {

std::string_view to_string(log_action a) noexcept {
  switch (a) {
    case log_action::allocate: return "allocate";
    case log_action::free: return "free";
    case log_action::allocate_failure: return "allocate failure";
  }
  return "?";
}

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

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

/// The offending text, quoted and cut short so a binary blob cannot flood the report.
std::string quoted(std::string_view s) {
  std::string out = "'";
  std::size_t const n = std::min<std::size_t>(s.size(), 40);
  for (std::size_t i = 0; i < n; ++i) {
    unsigned char const c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (s.size() > n) out += "...";
  out += "'";
  return out;
}

template <typename T>
bool parse_decimal(std::string_view s, T& out) noexcept {
  if (s.empty()) return false;
  auto const [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 10);
  return ec == std::errc{} && p == s.data() + s.size();
}

bool parse_hex(std::string_view s, std::uint64_t& out) noexcept {
  if (s.empty()) return false;
  auto const [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  return ec == std::errc{} && p == s.data() + s.size();
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

enum column_id : std::uint8_t {
  col_thread, col_time, col_action, col_pointer, col_size, col_stream, col_device, col_entry,
  col_time_ns, col_duration, col_result, col_reserved, col_unknown
};

column_id column_of(std::string_view name) noexcept {
  static constexpr std::array<std::string_view, col_unknown> names{
      "Thread", "Time", "Action", "Pointer", "Size", "Stream", "Device",
      "Entry", "TimeNs", "DurationNs", "Result", "Reserved"};
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<column_id>(i);
  }
  return col_unknown;
}

class log_parser {
 public:
  log_parser(std::string_view text, parsed_log& log) : text_{text}, log_{log} {}

  void run() {
    // A killed writer may leave the file padded with NULs (preallocated blocks).
    while (!text_.empty() && text_.back() == '\0') text_.remove_suffix(1);
    if (text_.size() >= 3 && text_.substr(0, 3) == "\xEF\xBB\xBF") text_.remove_prefix(3);
    if (text_.empty()) {
      fail(0, "empty file (no header line)");
      return;
    }
    std::size_t pos = 0;
    std::uint32_t line_no = 0;
    bool header_done = false;
    while (pos < text_.size()) {
      ++line_no;
      char const* nl = static_cast<char const*>(std::memchr(text_.data() + pos, '\n', text_.size() - pos));
      bool const complete = nl != nullptr;
      std::size_t const end = complete ? static_cast<std::size_t>(nl - text_.data()) : text_.size();
      std::string_view const line = text_.substr(pos, end - pos);
      pos = complete ? end + 1 : text_.size();
      if (!header_done) {
        if (!read_header(line)) return;
        header_done = true;
        continue;
      }
      if (!complete) {
        warn(line_no, fmt::format("truncated last line (no newline at end of file): {}; ignored", quoted(line)));
        continue;
      }
      if (trim(line).empty()) continue;
      read_line(line, line_no);
    }
    log_.lines = line_no;
    log_.readable = true;
  }

 private:
  void fail(std::size_t line, std::string msg) {
    log_.readable = false;
    log_.fatal = log_diagnostic{log_.path, line, std::move(msg)};
  }

  void warn(std::size_t line, std::string msg) {
    ++log_.warning_count;
    if (log_.warnings.size() < parsed_log::max_kept_warnings) {
      log_.warnings.push_back({log_.path, line, std::move(msg)});
    }
  }

  bool read_header(std::string_view line) {
    std::size_t count = 0;
    std::array<bool, col_unknown> seen{};
    std::string_view rest = line;
    while (true) {
      std::size_t const comma = rest.find(',');
      std::string_view const name = trim(rest.substr(0, comma));
      column_id const id = column_of(name);
      if (id != col_unknown && !seen[id]) {
        seen[id] = true;
        index_[id] = count;
      }
      ++count;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    for (column_id const required : {col_action, col_pointer, col_size}) {
      if (!seen[required]) {
        static constexpr std::array<std::string_view, 3> req_names{"Action", "Pointer", "Size"};
        fail(1, fmt::format("header lacks column '{}' (not an allocation log? header: {})",
                            req_names[required - col_action], quoted(line)));
        return false;
      }
    }
    if (!seen[col_time] && !seen[col_time_ns]) {
      fail(1, fmt::format("header lacks a clock column 'Time' or 'TimeNs' (header: {})", quoted(line)));
      return false;
    }
    auto& c = log_.columns;
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
    for (std::size_t i = 0; i < col_unknown; ++i) {
      if (!seen[i]) index_[i] = no_column;
    }
    fields_.resize(count);
    return true;
  }

  /// Entry/Result texts repeat a handful of values (entry points, result codes): a
  /// last-hit check and a short linear scan beat a hash map here.
  std::uint16_t intern(std::string_view s) {
    if (s.empty()) return 0;
    auto& strings = log_.strings;
    if (last_interned_ < strings.size() && strings[last_interned_] == s) return last_interned_;
    for (std::size_t i = 1; i < strings.size(); ++i) {
      if (strings[i] == s) return last_interned_ = static_cast<std::uint16_t>(i);
    }
    if (strings.size() >= 0xffff) return 0;  // absurdly many distinct names: keep the events
    strings.emplace_back(s);
    return last_interned_ = static_cast<std::uint16_t>(strings.size() - 1);
  }

  std::string_view field(column_id id) const noexcept { return fields_[index_[id]]; }

  void read_line(std::string_view line, std::uint32_t line_no) {
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
      return;
    }

    log_event ev;
    ev.line = line_no;
    std::string_view const act = field(col_action);
    if (act == "allocate") {
      ev.action = log_action::allocate;
    } else if (act == "free") {
      ev.action = log_action::free;
    } else if (act == "allocate failure") {
      ev.action = log_action::allocate_failure;
    } else {
      warn(line_no, fmt::format("unknown action {} (expected allocate, allocate failure or free)", quoted(act)));
      return;
    }
    if (!parse_pointer(field(col_pointer), ev.pointer)) {
      warn(line_no, fmt::format("bad pointer {} (expected 0x... or (nil))", quoted(field(col_pointer))));
      return;
    }
    if (!parse_decimal(field(col_size), ev.size)) {
      warn(line_no, fmt::format("bad size {} (expected a decimal byte count)", quoted(field(col_size))));
      return;
    }
    if (index_[col_thread] != no_column) {
      std::string_view const t = field(col_thread);
      if (!parse_decimal(t, ev.thread) && !parse_pointer(t, ev.thread)) {
        warn(line_no, fmt::format("bad thread id {}", quoted(t)));
        return;
      }
    }
    if (index_[col_stream] != no_column && !parse_stream(field(col_stream), ev.stream)) {
      warn(line_no, fmt::format("bad stream {}", quoted(field(col_stream))));
      return;
    }
    if (index_[col_device] != no_column) {
      int dev = 0;
      if (!parse_decimal(field(col_device), dev) || dev < 0 || dev > 32767) {
        warn(line_no, fmt::format("bad device {}", quoted(field(col_device))));
        return;
      }
      ev.device = static_cast<std::int16_t>(dev);
    }
    if (index_[col_time] != no_column) {
      auto const tod = parse_time_of_day(field(col_time));
      if (!tod) {
        warn(line_no, fmt::format("bad time {} (expected HH:MM:SS.ffffff)", quoted(field(col_time))));
        return;
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
      return;
    }
    if (index_[col_duration] != no_column && !parse_decimal(field(col_duration), ev.duration_ns)) {
      warn(line_no, fmt::format("bad DurationNs {}", quoted(field(col_duration))));
      return;
    }
    if (index_[col_reserved] != no_column) {
      std::string_view const r = field(col_reserved);
      if (!r.empty() && (!parse_decimal(r, ev.reserved) || ev.reserved < 0)) {
        warn(line_no, fmt::format("bad Reserved {}", quoted(r)));
        return;
      }
    }
    if (index_[col_entry] != no_column) ev.entry = intern(field(col_entry));
    if (index_[col_result] != no_column) ev.result = intern(field(col_result));
    log_.events.push_back(ev);
  }

  static constexpr std::size_t no_column = ~std::size_t{0};

  std::string_view text_;
  parsed_log& log_;
  std::array<std::size_t, col_unknown> index_{};
  std::vector<std::string_view> fields_;
  std::uint16_t last_interned_{0};
  bool have_clock_{false};
  std::int64_t last_tod_ns_{0};
  std::int64_t day_ns_{0};
};

}  // namespace

parsed_log parse_log(std::string_view text, std::string name) {
  parsed_log log;
  log.path = std::move(name);
  // ~70 bytes per line in either dialect: one reservation instead of log2(n) copies.
  log.events.reserve(text.size() / 64 + 1);
  log_parser{text, log}.run();
  log.events.shrink_to_fit();
  return log;
}

parsed_log read_log(std::string const& path) {
  struct file_closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, file_closer> f{std::fopen(path.c_str(), "rb")};
  auto unreadable = [&](std::string const& why) {
    parsed_log log;
    log.path = path;
    log.fatal = log_diagnostic{path, 0, fmt::format("cannot read: {}", why)};
    return log;
  };
  if (!f) return unreadable(std::strerror(errno));
  struct stat st {};
  if (::fstat(fileno(f.get()), &st) != 0) return unreadable(std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return unreadable("is a directory");
  std::string text;
  if (S_ISREG(st.st_mode)) text.reserve(static_cast<std::size_t>(st.st_size));
  // Read in chunks: works for pipes and files still growing, too.
  std::array<char, 1 << 16> buf;
  while (std::size_t const got = std::fread(buf.data(), 1, buf.size(), f.get())) text.append(buf.data(), got);
  if (std::ferror(f.get())) return unreadable(std::strerror(errno));
  return parse_log(text, path);
}

}  // namespace gpumem::tools
