// format_row: one CSV log row, formatted by hand. No snprintf, locale or
// allocation: it runs on the journal's helper thread for every row, and that
// thread bounds the log's rate when rows come back to back (budget: tens of ns).

#include <gpumem/log_row.hpp>

#include <array>
#include <cstring>

namespace gpumem {
namespace {

constexpr std::size_t max_text = 64;  // entry / result columns are cut here

char* put_text(char* o, std::string_view s) noexcept {
  std::memcpy(o, s.data(), s.size());
  return o + s.size();
}

// Copies a memoized number's digits: all `N` bytes of its buffer (a fixed-size
// copy is a couple of moves, a variable one a call), of which `len` count. The
// bytes past `len` land inside the row's max_row_bytes and are overwritten.
template <std::size_t N>
char* put_memo(char* o, char const (&text)[N], std::size_t len) noexcept {
  std::memcpy(o, text, N);
  return o + len;
}

// "00" .. "99": two digits per division halves the dependent divide chain.
constexpr char digit_pairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

constexpr std::uint64_t powers_of_10[20] = {1ULL,
                                            10ULL,
                                            100ULL,
                                            1000ULL,
                                            10000ULL,
                                            100000ULL,
                                            1000000ULL,
                                            10000000ULL,
                                            100000000ULL,
                                            1000000000ULL,
                                            10000000000ULL,
                                            100000000000ULL,
                                            1000000000000ULL,
                                            10000000000000ULL,
                                            100000000000000ULL,
                                            1000000000000000ULL,
                                            10000000000000000ULL,
                                            100000000000000000ULL,
                                            1000000000000000000ULL,
                                            10000000000000000000ULL};

// Digits of v without a loop: log10 from the bit length (1233/4096 ~ log10 2),
// corrected by one comparison. v|1 makes 0 count as one digit.
int decimal_digits(std::uint64_t v) noexcept {
  v |= 1;
  int const t = ((64 - __builtin_clzll(v)) * 1233) >> 12;
  return t - (v < powers_of_10[t] ? 1 : 0) + 1;
}

// Writes v in decimal straight into place, last digits first. Most values fit
// 32 bits, where division by a constant is cheaper.
template <class U>
void put_digits_backwards(char* w, U v) noexcept {
  while (v >= 100) {
    auto const r = static_cast<std::size_t>(v % 100) * 2;
    v /= 100;
    w -= 2;
    w[0] = digit_pairs[r];
    w[1] = digit_pairs[r + 1];
  }
  if (v >= 10) {
    w[-2] = digit_pairs[v * 2];
    w[-1] = digit_pairs[v * 2 + 1];
  } else {
    w[-1] = static_cast<char>('0' + v);
  }
}

char* put_u64(char* o, std::uint64_t v) noexcept {
  char* const end = o + decimal_digits(v);
  if (v <= UINT32_MAX) {
    put_digits_backwards(end, static_cast<std::uint32_t>(v));
  } else {
    put_digits_backwards(end, v);
  }
  return end;
}

// Small numbers (durations, devices) without the general routine's call.
inline char* put_small_u64(char* o, std::uint64_t v) noexcept {
  if (v < 10) {
    *o = static_cast<char>('0' + v);
    return o + 1;
  }
  if (v < 100) {
    std::memcpy(o, &digit_pairs[v * 2], 2);
    return o + 2;
  }
  if (v < 10000) {
    int const n = v < 1000 ? 3 : 4;
    char* const end = o + n;
    std::memcpy(end - 2, &digit_pairs[(v % 100) * 2], 2);
    auto const h = v / 100;
    if (n == 4) {
      std::memcpy(o, &digit_pairs[h * 2], 2);
    } else {
      *o = static_cast<char>('0' + h);
    }
    return end;
  }
  return put_u64(o, v);
}

char* put_i64(char* o, std::int64_t v) noexcept {
  if (v < 0) {
    *o++ = '-';
    return put_u64(o, ~static_cast<std::uint64_t>(v) + 1);  // also right for INT64_MIN
  }
  return put_u64(o, static_cast<std::uint64_t>(v));
}

// "00" .. "ff": two hex digits per lookup.
constexpr auto hex_pairs = [] {
  std::array<char, 512> t{};
  for (std::size_t i = 0; i < 256; ++i) {
    t[2 * i] = "0123456789abcdef"[i >> 4];
    t[2 * i + 1] = "0123456789abcdef"[i & 0xf];
  }
  return t;
}();

// v in hex without leading zeros, without a loop or a branch: all 16 digits (8
// independent lookups) into a scratch buffer, then a fixed-size copy of the
// significant tail.
char* put_hex_digits(char* o, std::uint64_t v) noexcept {
  int const digits = v == 0 ? 1 : (64 - __builtin_clzll(v) + 3) / 4;
  char scratch[32];
  std::memset(scratch + 16, 0, 16);                // read by the tail copy, then overwritten in the row
  std::size_t const bytes = v >> 48 == 0 ? 6 : 8;  // user-space and device addresses fit 48 bits
  for (std::size_t i = 0; i < bytes; ++i) std::memcpy(scratch + 14 - 2 * i, &hex_pairs[((v >> (8 * i)) & 0xff) * 2], 2);
  std::memcpy(o, scratch + 16 - digits, 16);  // bytes past `digits` are overwritten by what follows
  return o + digits;
}

// "0x" and v in hex without leading zeros, as %p writes it.
char* put_hex(char* o, std::uint64_t v) noexcept {
  *o++ = '0';
  *o++ = 'x';
  return put_hex_digits(o, v);
}

// The 9 digits of a nanosecond fraction (v < 10^9), zero-padded: two short
// dependency chains instead of one long one.
void put_nanos(char* o, std::uint32_t v) noexcept {
  std::size_t const hi = v / 100000;  // 4 digits
  std::size_t const lo = v % 100000;  // 5 digits
  std::size_t const lo4 = lo % 10000;
  std::memcpy(o, &digit_pairs[(hi / 100) * 2], 2);
  std::memcpy(o + 2, &digit_pairs[(hi % 100) * 2], 2);
  o[4] = static_cast<char>('0' + lo / 10000);
  std::memcpy(o + 5, &digit_pairs[(lo4 / 100) * 2], 2);
  std::memcpy(o + 7, &digit_pairs[(lo4 % 100) * 2], 2);
}

// Exactly `digits` digits, zero-padded (2, 6 or 9 here; v < 10^9).
char* put_fixed(char* o, std::uint32_t v, int digits) noexcept {
  int i = digits;
  for (; i >= 2; i -= 2) {
    auto const r = static_cast<std::size_t>(v % 100) * 2;
    v /= 100;
    o[i - 2] = digit_pairs[r];
    o[i - 1] = digit_pairs[r + 1];
  }
  if (i == 1) o[0] = static_cast<char>('0' + v % 10);
  return o + digits;
}

// A name's characters as written: separators, quotes and control characters
// become '_' (the row stays parseable); NUL ends the name.
constexpr auto name_chars = [] {
  std::array<char, 256> t{};
  for (std::size_t c = 1; c < 256; ++c) {
    t[c] = (c < 0x20 || c == ',' || c == '"' || c == 0x7f) ? '_' : static_cast<char>(c);
  }
  return t;
}();

char* put_name(char* o, const char* s) noexcept {
  for (std::size_t i = 0; i < max_text; ++i) {
    char const c = name_chars[static_cast<unsigned char>(s[i])];
    if (c == '\0') break;
    *o++ = c;
  }
  return o;
}

// Text that changes at most once a second (or never) for a thread's rows,
// memoized per thread: consecutive rows almost always fall in the same second.
struct row_memo {
  std::uint64_t thread_id = 0;
  std::uint8_t thread_len = 0;
  char thread_text[24]{};
  std::int64_t sec = INT64_MIN;  // UTC second of epoch the texts below are for
  std::int32_t utc_offset = 0;
  std::uint8_t epoch_len = 0;
  char hms[8]{};          // local HH:MM:SS
  char epoch_text[24]{};  // sec in decimal (sec >= 1 only)
  // The last Pointer, Size and Reserved written by this thread: a free repeats
  // its allocation's pointer and size, and Reserved changes only when the chain
  // grows or shrinks.
  std::uintptr_t pointer = 0;
  std::uint8_t pointer_len = 0;
  char pointer_text[24]{};
  std::uint64_t size = ~std::uint64_t{0};
  std::uint64_t reserved = ~std::uint64_t{0};
  std::uint8_t size_len = 0;
  std::uint8_t reserved_len = 0;
  char size_text[24]{};
  char reserved_text[24]{};
  // Entry names, sanitized, by address (they are static strings): a few slots,
  // replaced in turn. Copying the fixed-size text beats the per-character loop.
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
    if (slot.key == entry) {
      std::memcpy(o, slot.text, max_text);
      return o + slot.len;
    }
  }
  auto& slot = m.names[m.next_name++ % m.names.size()];
  slot.key = entry;
  slot.len = static_cast<std::uint8_t>(put_name(slot.text, entry) - slot.text);
  std::memcpy(o, slot.text, max_text);
  return o + slot.len;
}

// `v` in decimal from `text`, converting only when it differs from `last`.
char* put_remembered(char* o, std::uint64_t v, std::uint64_t& last, std::uint8_t& len, char (&text)[24]) noexcept {
  if (v != last || len == 0) {
    len = static_cast<std::uint8_t>(put_u64(text, v) - text);
    last = v;
  }
  return put_memo(o, text, len);
}

// The calling thread's memo. Out of line on purpose: in a shared library every
// access to a thread_local can become a __tls_get_addr call (nine per row when
// this was inlined); through the returned reference there is one.
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
    char* t = m.hms;
    t = put_fixed(t, static_cast<std::uint32_t>(sod / 3600), 2);
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
  put_nanos(frac_text, static_cast<std::uint32_t>(frac));

  char* o = out;
  o = put_memo(o, m.thread_text, m.thread_len);
  *o++ = ',';
  o = put_text(o, {m.hms, 8});
  *o++ = '.';
  o = put_text(o, {frac_text, 6});
  *o++ = ',';

  switch (row.action) {
    case log_action::allocate: o = put_text(o, "allocate"); break;
    case log_action::allocate_failure: o = put_text(o, "allocate failure"); break;
    case log_action::free: o = put_text(o, "free"); break;
  }
  *o++ = ',';

  if (row.pointer == 0) {
    o = put_text(o, "(nil)");
  } else {
    auto const p = row.pointer;
    if (p != m.pointer || m.pointer_len == 0) {
      m.pointer_len = static_cast<std::uint8_t>(put_hex(m.pointer_text, p) - m.pointer_text);
      m.pointer = p;
    }
    o = put_memo(o, m.pointer_text, m.pointer_len);
  }
  *o++ = ',';
  o = put_remembered(o, row.size, m.size, m.size_len, m.size_text);
  *o++ = ',';
  o = row.stream == 0 ? put_text(o, "0") : put_hex(o, row.stream);
  *o++ = ',';
  o = row.device >= 0 ? put_small_u64(o, static_cast<std::uint64_t>(row.device)) : put_i64(o, row.device);
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
  } else if (row.time_ns >= 0) {  // below one second: no leading zeros
    o = put_u64(o, static_cast<std::uint64_t>(frac));
  } else {
    o = put_i64(o, row.time_ns);
  }
  *o++ = ',';
  if (row.duration_ns != log_row::unmeasured) o = put_small_u64(o, row.duration_ns);
  *o++ = ',';
  o = row.result != nullptr ? put_name(o, row.result) : put_text(o, "CUDA_SUCCESS");
  *o++ = ',';
  if (row.reserved >= 0) {
    o = put_remembered(o, static_cast<std::uint64_t>(row.reserved), m.reserved, m.reserved_len, m.reserved_text);
  }
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
