#include "observe/oom_snapshot.hpp"

#include "observe/call_sites.hpp"
#include "observe/event_log.hpp"
#include "observe/stack_table.hpp"
#include "observe/whole_file.hpp"
#include "serve/created_memory.hpp"
#include "serve/device_chains.hpp"
#include "serve/own_context_memory.hpp"
#include "shim_state.hpp"

#include <gpumem/config.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/os_thread.hpp>
#include <gpumem/limiting_resource_adaptor.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

namespace gpumem::shim {
namespace {

constexpr std::int64_t burst_gap_ns = 1'000'000'000;
constexpr std::size_t top_sites = 5;
constexpr std::size_t frames_per_site = 32;
constexpr int in_flight_polls = 200;  // at most 200 ms for allocations still being made
constexpr long in_flight_poll_ns = 1'000'000;

std::atomic<std::int64_t> last_failure_ns{INT64_MIN / 2};
std::atomic<std::uint64_t> unreported{0};  // failures since the last message
std::atomic<int> bursts{0};
std::atomic<bool> writing{false};  // the one snapshot buffer is in use

std::int64_t monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// Appends to a fixed buffer; what does not fit is cut (and the text says so by ending early).
class text {
 public:
  text(char* buf, std::size_t cap) noexcept : buf_{buf}, cap_{cap} { buf_[0] = '\0'; }
  void add(char const* fmt, ...) noexcept __attribute__((format(printf, 2, 3))) {
    if (len_ + 1 >= cap_) return;
    va_list ap;
    va_start(ap, fmt);
    int const n = std::vsnprintf(buf_ + len_, cap_ - len_, fmt, ap);
    va_end(ap);
    if (n > 0) len_ = std::min(cap_ - 1, len_ + static_cast<std::size_t>(n));
  }
  /// A JSON string (quoted, escaped); null for nullptr.
  void json(char const* s) noexcept {
    if (s == nullptr) {
      add("null");
      return;
    }
    add("\"");
    for (; *s != '\0' && len_ + 8 < cap_; ++s) {
      auto const c = static_cast<unsigned char>(*s);
      if (c == '"' || c == '\\') {
        add("\\%c", c);
      } else if (c < 0x20 || c == 0x7f) {
        add("\\u%04x", c);
      } else {
        buf_[len_++] = static_cast<char>(c);
        buf_[len_] = '\0';
      }
    }
    add("\"");
  }
  [[nodiscard]] char const* data() const noexcept { return buf_; }
  [[nodiscard]] std::size_t size() const noexcept { return len_; }

 private:
  char* buf_;
  std::size_t cap_;
  std::size_t len_ = 0;
};

/// "1.50 GiB" into `out`.
char const* human(char (&out)[32], std::uint64_t b) noexcept {
  static constexpr char const* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) {
    std::snprintf(out, sizeof out, "%llu B", static_cast<unsigned long long>(b));
  } else {
    std::snprintf(out, sizeof out, "%.2f %s", v, units[u]);
  }
  return out;
}

char const* base_name(char const* path) noexcept {
  char const* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

struct facts {
  int device = -1;
  std::size_t bytes = 0;
  char const* entry = nullptr;
  std::uintptr_t stream = 0;
  std::uint64_t thread = 0;
  std::int64_t time_ns = 0;
  bool have_info = false;
  resource_info info{};
  std::int64_t live_bytes = -1, live_count = -1;
  std::int64_t in_flight = 0;  // charged to the limit by allocations still being made
  std::size_t limit = 0;       // 0: none
  created_totals created{};    // device memory the program created itself
  bool have_device = false;
  std::size_t device_free = 0, device_total = 0;
  std::uint64_t earlier_failures = 0;
  int number = 0;
  std::string chain, log, stacks, snapshot;
  stack_ref request_stack{};
  live_site sites[top_sites]{};
  std::size_t site_count = 0;
};

/// Bytes `lim` has charged for allocations of the chain still being made (admitted,
/// not yet returned: not yet in the live statistics); 0 when none surely is. A
/// charge is the request rounded up to 256 bytes: up to 255 bytes per live
/// allocation are rounding.
std::int64_t charged_in_flight(device_chain& c, limiting_resource_adaptor const& lim) noexcept {
  auto const live = c.chain->live_stats().bytes().current;
  auto const count = c.chain->live_stats().allocations().current;
  auto const outside = static_cast<std::int64_t>(created_on(c.device).bytes + own_context_bytes(c.device));
  auto const unexplained = static_cast<std::int64_t>(lim.used_bytes()) - outside - live;
  return unexplained > 255 * count ? unexplained : 0;
}

void gather(facts& f, device_chain& c) noexcept {
  if (auto* lim = c.chain->limiter()) {
    f.limit = lim->limit();
    // Other threads' allocations the limit admitted may still be on their way (a
    // pool growing for them): read now, the message would count a fraction of
    // what the program holds. They are waited for, briefly: this call fails anyway.
    for (int i = 0; i < in_flight_polls && (f.in_flight = charged_in_flight(c, *lim)) > 0; ++i) {
      timespec const pause{0, in_flight_poll_ns};
      nanosleep(&pause, nullptr);
    }
  }
  try {
    f.info = c.chain->info();
    f.have_info = true;
  } catch (...) {}
  auto const live = c.chain->live_stats().bytes();
  auto const count = c.chain->live_stats().allocations();
  f.live_bytes = live.current;
  f.live_count = count.current;
  f.created = created_on(c.device);
  auto const& d = detail::driver();
  if (d.cuMemGetInfo != nullptr && d.cuMemGetInfo(&f.device_free, &f.device_total) == CUDA_SUCCESS) {
    f.have_device = true;
  }
  try {
    f.chain = c.chain->describe();
  } catch (...) {}
  if (stacks_enabled()) {
    f.request_stack = record_current_stack();
    f.site_count = top_live_sites(f.sites, top_sites);
  }
}

void frames_json(text& t, std::uint32_t slot) noexcept {
  frame_info frames[frames_per_site];
  std::size_t const n = stack_frames(slot, frames, frames_per_site);
  t.add("[");
  for (std::size_t i = 0; i < n; ++i) {
    auto const& fr = frames[i];
    t.add("%s{\"address\":\"0x%llx\",\"module\":", i == 0 ? "" : ",", static_cast<unsigned long long>(fr.address));
    t.json(fr.module_path);
    if (fr.module_path != nullptr) {
      t.add(",\"offset\":\"0x%llx\"}", static_cast<unsigned long long>(fr.address - fr.bias));
    } else {
      t.add(",\"offset\":null}");
    }
  }
  t.add("]");
}

void snapshot_json(text& t, facts const& f) noexcept {
  t.add("{\"gpumem_oom_snapshot\":1,\"pid\":%ld,\"time_ns\":%lld,\"device\":%d,\n", static_cast<long>(::getpid()),
        static_cast<long long>(f.time_ns), f.device);
  t.add("\"request\":{\"bytes\":%zu,\"entry\":", f.bytes);
  t.json(f.entry);
  t.add(",\"stream\":\"0x%llx\",\"thread\":%llu,\"result\":\"CUDA_ERROR_OUT_OF_MEMORY\",\"stack\":",
        static_cast<unsigned long long>(f.stream), static_cast<unsigned long long>(f.thread));
  if (f.request_stack) {
    t.add("\"%llx\",\"frames\":", static_cast<unsigned long long>(f.request_stack.id));
    frames_json(t, f.request_stack.slot);
  } else {
    t.add("null,\"frames\":[]");
  }
  t.add("},\n\"live\":{\"bytes\":%lld,\"count\":%lld,\"in_flight_bytes\":%lld},\n",
        static_cast<long long>(f.live_bytes), static_cast<long long>(f.live_count),
        static_cast<long long>(f.in_flight));
  if (f.have_info) {
    t.add(
        "\"pool\":{\"reserved_bytes\":%zu,\"used_bytes\":%zu,\"free_bytes\":%zu,\"largest_free_block\":%zu,"
        "\"pending_bytes\":%zu,\"fragmentation\":%.4f},\n",
        f.info.reserved_bytes, f.info.used_bytes, f.info.free_bytes, f.info.largest_free_block, f.info.pending_bytes,
        f.info.fragmentation());
  } else {
    t.add("\"pool\":null,\n");
  }
  if (f.limit != 0) {
    t.add("\"limit_bytes\":%zu,", f.limit);
  } else {
    t.add("\"limit_bytes\":null,");
  }
  if (f.have_device) {
    t.add("\"device_memory\":{\"free_bytes\":%zu,\"total_bytes\":%zu},\n", f.device_free, f.device_total);
  } else {
    t.add("\"device_memory\":null,\n");
  }
  t.add("\"burst\":%d,\"earlier_unreported_failures\":%llu,\"chain\":", f.number,
        static_cast<unsigned long long>(f.earlier_failures));
  t.json(f.chain.empty() ? nullptr : f.chain.c_str());
  t.add(",\"log\":");
  t.json(f.log.empty() ? nullptr : f.log.c_str());
  t.add(",\"stacks_file\":");
  t.json(f.stacks.empty() ? nullptr : f.stacks.c_str());
  t.add(",\"stacks_recorded\":%s,\n\"top_sites\":[", stacks_enabled() ? "true" : "false");
  for (std::size_t i = 0; i < f.site_count; ++i) {
    auto const& s = f.sites[i];
    t.add("%s\n{\"stack\":\"%llx\",\"live_bytes\":%lld,\"live_count\":%lld,\"frames\":", i == 0 ? "" : ",",
          static_cast<unsigned long long>(s.id), static_cast<long long>(s.bytes), static_cast<long long>(s.count));
    frames_json(t, s.slot);
    t.add("}");
  }
  t.add("]}\n");
}

// Where the snapshot goes: beside the log, else beside the report file.
std::string snapshot_path(facts& f, int number) noexcept {
  try {
    std::string base;
    if (log_paths(f.device, f.log, f.stacks)) {
      base = f.log;
    } else if (auto const& st = state().settings; st.report && !st.report_file.empty()) {
      base = config::expand_template(st.report_file, f.device < 0 ? 0 : f.device);
    }
    if (base.empty()) return {};
    return base + ".oom-" + std::to_string(number) + ".json";
  } catch (...) { return {}; }
}

void say(facts const& f, bool written) noexcept {
  char a[32], b[32], c[32], d[32], e[32], g[32], h[32];
  char limit[160] = "";
  if (f.limit != 0) std::snprintf(limit, sizeof limit, "; limit %s", human(a, f.limit));
  if (f.created.handles != 0) {
    std::size_t const n = std::strlen(limit);
    std::snprintf(limit + n, sizeof limit - n, "; the program's own cuMemCreate memory: %s in %llu handles",
                  human(b, f.created.bytes), static_cast<unsigned long long>(f.created.handles));
  }
  char device[96] = "";
  if (f.have_device) {
    std::snprintf(device, sizeof device, "; the device has %s free of %s", human(b, f.device_free),
                  human(c, f.device_total));
  }
  char pool[256] = "";
  if (f.have_info) {
    std::snprintf(pool, sizeof pool,
                  "; the pool holds %s (%s cached, largest free block %s, fragmentation %.0f%%, %s waiting for "
                  "reclamation)",
                  human(d, f.info.reserved_bytes), human(e, f.info.free_bytes), human(g, f.info.largest_free_block),
                  100.0 * f.info.fragmentation(), human(h, f.info.pending_bytes));
  }
  char site[PATH_MAX + 160] = "";
  if (f.site_count > 0) {
    frame_info fr[1];
    if (stack_frames(f.sites[0].slot, fr, 1) == 1) {
      char where[PATH_MAX + 40];
      if (fr[0].module_path != nullptr) {
        std::snprintf(where, sizeof where, "%s+0x%llx", base_name(fr[0].module_path),
                      static_cast<unsigned long long>(fr[0].address - fr[0].bias));
      } else {
        std::snprintf(where, sizeof where, "0x%llx", static_cast<unsigned long long>(fr[0].address));
      }
      std::snprintf(site, sizeof site, "; the largest call site holds %s in %lld allocations (stack %llx, from %s)",
                    human(a, static_cast<std::uint64_t>(f.sites[0].bytes)), static_cast<long long>(f.sites[0].count),
                    static_cast<unsigned long long>(f.sites[0].id), where);
    }
  }
  char earlier[96] = "";
  if (f.earlier_failures > 0) {
    std::snprintf(earlier, sizeof earlier, " (%llu more failed since the last message)",
                  static_cast<unsigned long long>(f.earlier_failures));
  }
  char live[32];
  human(live, f.live_bytes > 0 ? static_cast<std::uint64_t>(f.live_bytes) : 0);
  char flight[96] = "";
  if (f.in_flight > 0) {
    std::snprintf(flight, sizeof flight, " (and %s admitted by the limit for allocations still being made)",
                  human(a, static_cast<std::uint64_t>(f.in_flight)));
  }
  char req[32];
  message(level::warn,
          "out of memory on device %d: %s(%s) failed, after gpumem released its cached memory and retried%s; the "
          "program holds %s in %lld "
          "allocations%s%s%s%s%s%s%s%s",
          f.device, f.entry != nullptr ? f.entry : "allocate", human(req, f.bytes), earlier, live,
          static_cast<long long>(f.live_count), flight, pool, limit, device, site, written ? "; snapshot: " : "",
          written ? f.snapshot.c_str() : "", written ? " (gpumem-report reads it)" : "");
}

}  // namespace

void explain_out_of_memory(device_chain& c, std::size_t bytes, CUstream stream, const char* entry) noexcept {
  // One message per burst: a failure within burst_gap_ns of the previous one is counted only.
  std::int64_t const now = monotonic_ns();
  std::int64_t const previous = last_failure_ns.exchange(now, std::memory_order_acq_rel);
  if (now - previous < burst_gap_ns) {
    unreported.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!message_enabled(level::warn) && !logging_enabled() && state().settings.report_file.empty()) return;
  facts f;
  f.device = c.device;
  f.bytes = bytes;
  f.entry = entry;
  f.stream = reinterpret_cast<std::uintptr_t>(stream);
  f.thread = detail::os_thread_id();
  f.time_ns = detail::realtime_ns();
  f.earlier_failures = unreported.exchange(0, std::memory_order_relaxed);
  f.number = bursts.fetch_add(1, std::memory_order_relaxed) + 1;
  gather(f, c);

  bool written = false;
  if (f.number <= max_snapshots && !writing.exchange(true, std::memory_order_acquire)) {
    f.snapshot = snapshot_path(f, f.number);
    if (!f.snapshot.empty()) {
      static char buffer[256 * 1024];
      text t{buffer, sizeof buffer};
      snapshot_json(t, f);
      int const err = write_whole_file(f.snapshot.c_str(), t.data(), t.size());
      written = err == 0;
      if (!written) {
        message(level::warn, "cannot write the out-of-memory snapshot '%s': %s", f.snapshot.c_str(),
                std::strerror(err));
      }
    }
    writing.store(false, std::memory_order_release);
  }
  say(f, written);
}

}  // namespace gpumem::shim
