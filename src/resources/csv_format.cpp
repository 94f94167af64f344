// format_row: one CSV log row, formatted by hand. No snprintf, locale or
// allocation. It runs on the journal's helper thread (and, rarely, on a thread
// whose row could not be queued), so plain std::to_chars is fast enough.

#include <gpumem/log_row.hpp>

#include <charconv>
#include <cstring>

namespace gpumem {
namespace {

constexpr std::size_t max_text = 64;  // entry / result columns are cut here

char* put_text(char* o, std::string_view s) noexcept {
  std::memcpy(o, s.data(), s.size());
  return o + s.size();
}

template <class T>
char* put_number(char* o, T v, int base = 10) noexcept {
  return std::to_chars(o, o + 24, v, base).ptr;  // 24 bytes hold any 64-bit value
}

// Exactly `digits` decimal digits, zero-padded (v < 10^digits).
char* put_fixed(char* o, std::uint64_t v, int digits) noexcept {
  for (int i = digits - 1; i >= 0; --i, v /= 10) o[i] = static_cast<char>('0' + v % 10);
  return o + digits;
}

// A name's characters as written: separators, quotes and control characters
// become '_' (the row stays parseable); NUL ends the name; cut at max_text.
char* put_name(char* o, const char* s) noexcept {
  for (std::size_t i = 0; i < max_text && s[i] != '\0'; ++i) {
    auto const c = static_cast<unsigned char>(s[i]);
    *o++ = c < 0x20 || c == ',' || c == '"' || c == 0x7f ? '_' : static_cast<char>(c);
  }
  return o;
}

}  // namespace

std::size_t format_row(char* out, log_row const& row) noexcept {
  // Split before adding the (whole-second) local offset: no overflow at the extremes.
  std::int64_t sec = row.time_ns / 1'000'000'000;
  std::int64_t frac = row.time_ns % 1'000'000'000;
  if (frac < 0) {  // floor, for times before the epoch
    frac += 1'000'000'000;
    --sec;
  }
  std::int64_t sod = (sec + row.utc_offset_s) % 86400;
  if (sod < 0) sod += 86400;

  char* o = put_number(out, row.thread_id);
  *o++ = ',';
  o = put_fixed(o, static_cast<std::uint64_t>(sod / 3600), 2);
  *o++ = ':';
  o = put_fixed(o, static_cast<std::uint64_t>(sod / 60 % 60), 2);
  *o++ = ':';
  o = put_fixed(o, static_cast<std::uint64_t>(sod % 60), 2);
  *o++ = '.';
  o = put_fixed(o, static_cast<std::uint64_t>(frac) / 1000, 6);
  *o++ = ',';
  o = put_text(o, action_name(row.action));
  *o++ = ',';
  if (row.pointer == nullptr) {
    o = put_text(o, "(nil)");
  } else {
    o = put_text(o, "0x");
    o = put_number(o, reinterpret_cast<std::uintptr_t>(row.pointer), 16);
  }
  *o++ = ',';
  o = put_number(o, row.size);
  *o++ = ',';
  if (row.stream == 0) {
    *o++ = '0';
  } else {
    o = put_text(o, "0x");
    o = put_number(o, row.stream, 16);
  }
  *o++ = ',';
  o = put_number(o, row.device);
  *o++ = ',';
  o = row.entry != nullptr ? put_name(o, row.entry) : put_text(o, row.action == log_action::free ? "free" : "allocate");
  *o++ = ',';
  o = put_number(o, row.time_ns);
  *o++ = ',';
  if (row.duration_ns != log_row::unmeasured) o = put_number(o, row.duration_ns);
  *o++ = ',';
  o = row.result != nullptr ? put_name(o, row.result) : put_text(o, "CUDA_SUCCESS");
  *o++ = ',';
  if (row.reserved >= 0) o = put_number(o, row.reserved);
  *o++ = ',';
  if (row.stack != 0) o = put_number(o, row.stack, 16);  // without "0x"
  *o++ = '\n';
  return static_cast<std::size_t>(o - out);
}

std::size_t format_incomplete_marker(char* out, std::size_t capacity, std::uint64_t dropped,
                                     std::string_view reason) noexcept {
  constexpr std::string_view dropped_key = "dropped_rows=";
  constexpr std::string_view reason_key = ",reason=";
  // The fixed part, the count's at most 20 digits, the line break.
  if (capacity < csv_log_incomplete_prefix.size() + dropped_key.size() + 20 + reason_key.size() + 1) return 0;
  char* o = put_text(out, csv_log_incomplete_prefix);
  o = put_text(o, dropped_key);
  o = put_number(o, dropped);
  o = put_text(o, reason_key);
  std::size_t const room = capacity - static_cast<std::size_t>(o - out) - 1;
  for (std::size_t i = 0; i < reason.size() && i < room; ++i) {
    char const c = reason[i];
    *o++ = c == ',' || c == '\n' || c == '\r' ? ' ' : c;
  }
  *o++ = '\n';
  return static_cast<std::size_t>(o - out);
}

}  // namespace gpumem
