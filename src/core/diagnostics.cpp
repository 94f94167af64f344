#include <gpumem/diagnostics.hpp>

#include <gpumem/detail/quiet_io.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace gpumem {
namespace {

constexpr std::array<std::string_view, 6> level_names{"trace", "debug", "info", "warn", "error", "off"};

std::atomic<int> threshold{static_cast<int>(log_level::warn)};

constexpr std::string_view prefix = "gpumem: ";

/// Formats the line and writes it with one write(2).
void write_line(const char* format, std::va_list args) noexcept {
  char stack_buf[1024];
  std::va_list again;
  va_copy(again, args);
  int const m = std::vsnprintf(stack_buf + prefix.size(), sizeof stack_buf - prefix.size() - 1, format, args);
  std::size_t const body = m < 0 ? 0 : static_cast<std::size_t>(m);
  char* buf = stack_buf;
  // A long line gets a buffer of its size, so it is never cut before the reason
  // at its end. Only without memory is it cut.
  if (prefix.size() + body + 1 > sizeof stack_buf) {
    if (auto* big = static_cast<char*>(std::malloc(prefix.size() + body + 2)); big != nullptr) {
      std::vsnprintf(big + prefix.size(), body + 1, format, again);
      buf = big;
    }
  }
  va_end(again);
  std::size_t const n = buf == stack_buf ? std::min(body, sizeof stack_buf - prefix.size() - 2) : body;
  char* text = buf + prefix.size();
  std::size_t start = 0;  // where the line begins: before our prefix, or at the text's own
  if (std::string_view{text, n}.starts_with(prefix)) {
    start = prefix.size();
  } else {
    std::memcpy(buf, prefix.data(), prefix.size());
  }
  text[n] = '\n';
  // One write: lines of several threads do not interleave. A failure to write to
  // stderr has nowhere to be reported, and a stderr nobody reads any more must
  // not kill the program with SIGPIPE.
  [[maybe_unused]] ssize_t const w = detail::write_without_sigpipe(STDERR_FILENO, buf + start,
                                                                   prefix.size() + n + 1 - start);
  if (buf != stack_buf) std::free(buf);
}

}  // namespace

std::optional<log_level> parse_log_level(std::string_view name) noexcept {
  for (std::size_t i = 0; i < level_names.size(); ++i) {
    if (name == level_names[i]) return static_cast<log_level>(i);
  }
  return std::nullopt;
}

std::string_view to_string(log_level level) noexcept {
  auto const i = static_cast<std::size_t>(level);
  return i < level_names.size() ? level_names[i] : std::string_view{"unknown"};
}

void set_log_level(log_level level) noexcept { threshold.store(static_cast<int>(level), std::memory_order_relaxed); }

log_level current_log_level() noexcept { return static_cast<log_level>(threshold.load(std::memory_order_relaxed)); }

bool log_enabled(log_level level) noexcept {
  return level != log_level::off && static_cast<int>(level) >= threshold.load(std::memory_order_relaxed);
}

void log_message_v(log_level level, const char* format, std::va_list args) noexcept {
  if (log_enabled(level)) write_line(format, args);
}

void log_message(log_level level, const char* format, ...) noexcept {
  if (!log_enabled(level)) return;
  std::va_list args;
  va_start(args, format);
  write_line(format, args);
  va_end(args);
}

void log_unfiltered(const char* format, ...) noexcept {
  std::va_list args;
  va_start(args, format);
  write_line(format, args);
  va_end(args);
}

}  // namespace gpumem
