// format_row: one CSV log row, formatted by hand. No snprintf, locale or
// allocation: this runs on every logged allocation (budget: tens of ns).

#include <gpumem/csv_log_writer.hpp>

#include <cstring>

namespace gpumem {
namespace {

constexpr std::size_t max_text = 64;  // entry / result columns are cut here

char* put_text(char* o, std::string_view s) noexcept {
  std::memcpy(o, s.data(), s.size());
  return o + s.size();
}

char* put_u64(char* o, std::uint64_t v) noexcept {
  char tmp[20];
  int i = 20;
  do {
    tmp[--i] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  return put_text(o, {tmp + i, static_cast<std::size_t>(20 - i)});
}

char* put_i64(char* o, std::int64_t v) noexcept {
  if (v < 0) {
    *o++ = '-';
    return put_u64(o, ~static_cast<std::uint64_t>(v) + 1);  // also right for INT64_MIN
  }
  return put_u64(o, static_cast<std::uint64_t>(v));
}

char* put_hex(char* o, std::uint64_t v) noexcept {
  char tmp[16];
  int i = 16;
  do {
    tmp[--i] = "0123456789abcdef"[v & 0xf];
    v >>= 4;
  } while (v != 0);
  *o++ = '0';
  *o++ = 'x';
  return put_text(o, {tmp + i, static_cast<std::size_t>(16 - i)});
}

char* put_fixed(char* o, std::uint64_t v, int digits) noexcept {
  for (int i = digits - 1; i >= 0; --i) {
    o[i] = static_cast<char>('0' + v % 10);
    v /= 10;
  }
  return o + digits;
}

// Copies a name, keeping the row parseable: separators, quotes and control
// characters become '_'.
char* put_name(char* o, const char* s) noexcept {
  for (std::size_t i = 0; i < max_text && s[i] != '\0'; ++i) {
    auto const c = static_cast<unsigned char>(s[i]);
    *o++ = (c < 0x20 || c == ',' || c == '"' || c == 0x7f) ? '_' : static_cast<char>(c);
  }
  return o;
}

// HH:MM:SS of a local second-of-epoch, memoized per thread: consecutive rows
// almost always fall in the same second.
char* put_hms(char* o, std::int64_t local_sec) noexcept {
  struct memo {
    std::int64_t sec = INT64_MIN;
    char text[8]{};
  };
  static thread_local memo m;
  if (m.sec != local_sec) {
    std::int64_t sod = local_sec % 86400;
    if (sod < 0) sod += 86400;
    char* t = m.text;
    t = put_fixed(t, static_cast<std::uint64_t>(sod / 3600), 2);
    *t++ = ':';
    t = put_fixed(t, static_cast<std::uint64_t>(sod / 60 % 60), 2);
    *t++ = ':';
    put_fixed(t, static_cast<std::uint64_t>(sod % 60), 2);
    m.sec = local_sec;
  }
  return put_text(o, {m.text, 8});
}

}  // namespace

std::size_t format_row(char* out, log_row const& row) noexcept {
  char* o = out;
  o = put_u64(o, row.thread_id);
  *o++ = ',';

  std::int64_t const local_ns = row.time_ns + std::int64_t{row.utc_offset_s} * 1'000'000'000;
  std::int64_t sec = local_ns / 1'000'000'000;
  std::int64_t frac = local_ns % 1'000'000'000;
  if (frac < 0) {  // floor, for times before the epoch
    frac += 1'000'000'000;
    --sec;
  }
  o = put_hms(o, sec);
  *o++ = '.';
  o = put_fixed(o, static_cast<std::uint64_t>(frac / 1000), 6);
  *o++ = ',';

  switch (row.action) {
    case log_action::allocate: o = put_text(o, "allocate"); break;
    case log_action::allocate_failure: o = put_text(o, "allocate failure"); break;
    case log_action::free: o = put_text(o, "free"); break;
  }
  *o++ = ',';

  o = row.pointer == nullptr ? put_text(o, "(nil)") : put_hex(o, reinterpret_cast<std::uintptr_t>(row.pointer));
  *o++ = ',';
  o = put_u64(o, row.size);
  *o++ = ',';
  o = row.stream == 0 ? put_text(o, "0") : put_hex(o, row.stream);
  *o++ = ',';
  o = put_i64(o, row.device);
  *o++ = ',';
  if (row.entry != nullptr) {
    o = put_name(o, row.entry);
  } else {
    o = put_text(o, row.action == log_action::free ? "free" : "allocate");
  }
  *o++ = ',';
  o = put_i64(o, row.time_ns);
  *o++ = ',';
  o = put_u64(o, row.duration_ns);
  *o++ = ',';
  o = put_name(o, row.result != nullptr ? row.result : "CUDA_SUCCESS");
  *o++ = '\n';
  return static_cast<std::size_t>(o - out);
}

}  // namespace gpumem
