// format_row: one CSV log row, formatted by hand. No snprintf, locale or
// allocation: it runs on the journal's helper thread for every row, and that
// thread bounds the log's rate when rows come back to back.

#include <gpumem/log_row.hpp>

#include <array>
#include <charconv>
#include <cstring>

namespace gpumem {
namespace {

constexpr std::size_t max_text = 64;  // entry / result columns are cut here

char* put_text(char* o, std::string_view s) noexcept {
  std::memcpy(o, s.data(), s.size());
  return o + s.size();
}

// "00" .. "99": two digits per division halves the dependent divide chain.
constexpr char digit_pairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

// Copies a memoized text: all `N` bytes of its buffer (a fixed-size copy is a
// couple of moves, a variable one a call), of which `len` count. The bytes past
// `len` land inside the row's max_row_bytes and are overwritten.
template <std::size_t N>
char* put_memo(char* o, char const (&text)[N], std::size_t len) noexcept {
  std::memcpy(o, text, N);
  return o + len;
}

// v in decimal. libstdc++'s to_chars writes two digits per division, as a
// hand-written loop would.
char* put_u64(char* o, std::uint64_t v) noexcept { return std::to_chars(o, o + 20, v).ptr; }

char* put_i64(char* o, std::int64_t v) noexcept {
  if (v >= 0) return put_u64(o, static_cast<std::uint64_t>(v));
  *o++ = '-';
  return put_u64(o, ~static_cast<std::uint64_t>(v) + 1);  // also right for INT64_MIN
}

// v in hex without leading zeros (at least one digit).
char* put_hex_digits(char* o, std::uint64_t v) noexcept { return std::to_chars(o, o + 16, v, 16).ptr; }

// "0x" and v in hex, as %p writes it.
char* put_hex(char* o, std::uint64_t v) noexcept { return put_hex_digits(put_text(o, "0x"), v); }

// Exactly `digits` digits, zero-padded (v < 10^digits), two at a time.
char* put_fixed(char* o, std::uint32_t v, int digits) noexcept {
  int i = digits;
  for (; i >= 2; i -= 2, v /= 100) std::memcpy(o + i - 2, &digit_pairs[static_cast<std::size_t>(v % 100) * 2], 2);
  if (i == 1) o[0] = static_cast<char>('0' + v % 10);
  return o + digits;
}

// A name's characters as written: separators, quotes and control characters
// become '_' (the row stays parseable); NUL ends the name.
char* put_name(char* o, const char* s) noexcept {
  for (std::size_t i = 0; i < max_text && s[i] != '\0'; ++i) {
    auto const c = static_cast<unsigned char>(s[i]);
    *o++ = c < 0x20 || c == ',' || c == '"' || c == 0x7f ? '_' : static_cast<char>(c);
  }
  return o;
}

// A number's text, remade only when the number changes.
struct number_memo {
  std::uint64_t value = 0;
  std::uint8_t len = 0;
  char text[24]{};
};

template <char* (*put)(char*, std::uint64_t) noexcept>
char* put_remembered(char* o, number_memo& m, std::uint64_t v) noexcept {
  if (m.len == 0 || m.value != v) {
    m.len = static_cast<std::uint8_t>(put(m.text, v) - m.text);
    m.value = v;
  }
  return put_memo(o, m.text, m.len);
}

// Text that changes at most once a second (or never) for a thread's rows,
// memoized per thread: consecutive rows almost always fall in the same second,
// and share the thread and the few entry names; a free repeats its allocation's
// Pointer and Size, and Reserved changes only when the chain grows or shrinks.
struct row_memo {
  number_memo pointer, size, reserved;
  std::uint64_t thread_id = 0;
  std::uint8_t thread_len = 0;
  char thread_text[24]{};
  std::int64_t sec = INT64_MIN;  // UTC second of epoch the texts below are for
  std::int32_t utc_offset = 0;
  std::uint8_t epoch_len = 0;
  char hms[8]{};          // local HH:MM:SS
  char epoch_text[24]{};  // sec in decimal (sec >= 1 only)
  // Entry names, sanitized, by address (they are static strings): a few slots,
  // replaced in turn.
  struct name_slot {
    const char* key = nullptr;
    std::uint8_t len = 0;
    char text[max_text]{};
  };
  std::array<name_slot, 4> names{};
  std::uint8_t next_name = 0;
};

char* put_entry(char* o, row_memo& m, const char* entry) noexcept {
  for (auto const& slot : m.names) {
    if (slot.key == entry) return put_memo(o, slot.text, slot.len);
  }
  auto& slot = m.names[m.next_name++ % m.names.size()];
  slot.key = entry;
  slot.len = static_cast<std::uint8_t>(put_name(slot.text, entry) - slot.text);
  return put_memo(o, slot.text, slot.len);
}

// The calling thread's memo. Out of line on purpose: in a shared library every
// access to a thread_local can become a __tls_get_addr call; through the
// returned reference there is one.
[[gnu::noinline]] row_memo& thread_memo() noexcept {
  static thread_local row_memo m;
  return m;
}

row_memo& memo_for(std::uint64_t thread_id, std::int64_t sec, std::int32_t utc_offset) noexcept {
  row_memo& m = thread_memo();
  if (m.thread_len == 0 || m.thread_id != thread_id) {
    m.thread_len = static_cast<std::uint8_t>(put_u64(m.thread_text, thread_id) - m.thread_text);
    m.thread_id = thread_id;
  }
  if (m.sec != sec || m.utc_offset != utc_offset) {
    std::int64_t sod = (sec + utc_offset) % 86400;
    if (sod < 0) sod += 86400;
    char* t = put_fixed(m.hms, static_cast<std::uint32_t>(sod / 3600), 2);
    *t++ = ':';
    t = put_fixed(t, static_cast<std::uint32_t>(sod / 60 % 60), 2);
    *t++ = ':';
    put_fixed(t, static_cast<std::uint32_t>(sod % 60), 2);
    m.epoch_len = 0;
    if (sec > 0) {
      m.epoch_len = static_cast<std::uint8_t>(put_u64(m.epoch_text, static_cast<std::uint64_t>(sec)) - m.epoch_text);
    }
    m.sec = sec;
    m.utc_offset = utc_offset;
  }
  return m;
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
  auto& m = memo_for(row.thread_id, sec, row.utc_offset_s);
  // The nanosecond fraction once: Time shows its first 6 digits, TimeNs all 9.
  char frac_text[9];
  put_fixed(frac_text, static_cast<std::uint32_t>(frac), 9);

  char* o = put_memo(out, m.thread_text, m.thread_len);
  *o++ = ',';
  o = put_text(o, {m.hms, 8});
  *o++ = '.';
  o = put_text(o, {frac_text, 6});
  *o++ = ',';
  o = put_text(o, action_name(row.action));
  *o++ = ',';
  o = row.pointer == 0 ? put_text(o, "(nil)") : put_remembered<put_hex>(o, m.pointer, row.pointer);
  *o++ = ',';
  o = put_remembered<put_u64>(o, m.size, row.size);
  *o++ = ',';
  o = row.stream == 0 ? put_text(o, "0") : put_hex(o, row.stream);
  *o++ = ',';
  o = put_i64(o, row.device);
  *o++ = ',';
  if (row.entry != nullptr) {
    o = put_entry(o, m, row.entry);
  } else {
    o = put_text(o, row.action == log_action::free ? "free" : "allocate");
  }
  *o++ = ',';
  // TimeNs: the memoized seconds digits and the 9-digit fraction.
  if (row.time_ns >= 1'000'000'000) {
    o = put_memo(o, m.epoch_text, m.epoch_len);
    o = put_text(o, {frac_text, 9});
  } else {
    o = put_i64(o, row.time_ns);
  }
  *o++ = ',';
  if (row.duration_ns != log_row::unmeasured) o = put_u64(o, row.duration_ns);
  *o++ = ',';
  o = row.result != nullptr ? put_name(o, row.result) : put_text(o, "CUDA_SUCCESS");
  *o++ = ',';
  if (row.reserved >= 0) o = put_remembered<put_u64>(o, m.reserved, static_cast<std::uint64_t>(row.reserved));
  *o++ = ',';
  if (row.stack != 0) o = put_hex_digits(o, row.stack);  // without "0x"
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
  o = put_u64(o, dropped);
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
