#include <gpumem/call_context.hpp>
#include <gpumem/detail/os_thread.hpp>
#include <gpumem/diagnostics.hpp>
#include <gpumem/tracking_resource_adaptor.hpp>

#include <execinfo.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace gpumem {
namespace {

// Remembered unknown pointers per shard, for the once-per-pointer message; past
// this, unknown frees are still counted but no longer reported.
constexpr std::size_t max_reported_unknown = 1024;

void append_size(std::string& out, std::size_t bytes) {
  out += std::to_string(bytes);
  out += " B";
  if (bytes >= (std::size_t{1} << 20)) {
    out += " (";
    out += std::to_string(bytes >> 20);
    out += " MiB)";
  }
}

}  // namespace

tracking_resource_adaptor::tracking_resource_adaptor(device_memory_resource* upstream, bool capture_stacks)
    : forwarding_resource_adaptor{upstream, "tracking_resource_adaptor"}, capture_stacks_{capture_stacks} {}

tracking_resource_adaptor::shard& tracking_resource_adaptor::shard_for(void const* p) const noexcept {
  // Pointers are 256-aligned: drop the low bits, then Fibonacci-hash into 64 shards.
  auto const h = (reinterpret_cast<std::uintptr_t>(p) >> 8) * 0x9E3779B97F4A7C15ULL;
  return shards_[static_cast<std::size_t>(h >> 58)];
}

void* tracking_resource_adaptor::do_allocate(std::size_t bytes, stream_ref stream) {
  void* p = get_upstream()->allocate(bytes, stream);
  if (p == nullptr) return p;
  auto const& ctx = current_call();
  allocation_record rec{.ptr = p,
                        .bytes = bytes,
                        .stream = stream_handle(stream),
                        .thread_id = detail::os_thread_id(),
                        .time_ns = detail::realtime_ns(),
                        .entry_point = ctx.entry_point != nullptr ? ctx.entry_point : "allocate",
                        .device = ctx.device,
                        .stack = {}};
  if (capture_stacks_) {
    void* frames[max_stack_depth];
    int const n = ::backtrace(frames, max_stack_depth);
    rec.stack.assign(frames, frames + std::max(n, 0));
  }
  auto& s = shard_for(p);
  try {
    std::lock_guard lock{s.mutex};
    if (!s.reported_unknown.empty()) s.reported_unknown.erase(p);
    auto [it, inserted] = s.live.try_emplace(p, std::move(rec));
    if (!inserted) {  // the upstream reused a pointer we thought live: trust the upstream
      s.bytes -= it->second.bytes;
      it->second = std::move(rec);  // try_emplace left rec untouched
    }
    s.bytes += bytes;
  } catch (...) {
    // Out of host memory for the record: give the allocation back rather than
    // hand out memory the tracker cannot account for.
    get_upstream()->deallocate(p, bytes, stream);
    throw;
  }
  return p;
}

void tracking_resource_adaptor::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (p != nullptr) {
    auto& s = shard_for(p);
    bool report = false;
    std::size_t recorded = 0;
    {
      std::lock_guard lock{s.mutex};
      if (auto it = s.live.find(p); it != s.live.end()) {
        recorded = it->second.bytes;
        s.bytes -= recorded;
        s.live.erase(it);
      } else {
        unknown_frees_.fetch_add(1, std::memory_order_relaxed);
        try {
          report = s.reported_unknown.size() < max_reported_unknown && s.reported_unknown.insert(p).second;
        } catch (...) {
          report = false;  // no memory for the bookkeeping: count only
        }
      }
    }
    if (report) {
      log_message(log_level::debug, "tracking_resource_adaptor: deallocate of unknown pointer %p (%zu bytes)", p,
                  bytes);
    } else if (recorded != 0 && recorded != bytes) {
      log_message(log_level::debug, "tracking_resource_adaptor: %p freed with size %zu, allocated with %zu", p, bytes,
                  recorded);
    }
  }
  get_upstream()->deallocate(p, bytes, stream);
}

std::size_t tracking_resource_adaptor::outstanding_count() const {
  std::size_t n = 0;
  for (auto& s : shards_) {
    std::lock_guard lock{s.mutex};
    n += s.live.size();
  }
  return n;
}

std::size_t tracking_resource_adaptor::outstanding_bytes() const {
  std::size_t n = 0;
  for (auto& s : shards_) {
    std::lock_guard lock{s.mutex};
    n += s.bytes;
  }
  return n;
}

std::vector<allocation_record> tracking_resource_adaptor::outstanding() const {
  std::vector<allocation_record> all;
  for (auto& s : shards_) {
    std::lock_guard lock{s.mutex};
    for (auto const& [p, rec] : s.live) all.push_back(rec);
  }
  std::sort(all.begin(), all.end(), [](allocation_record const& a, allocation_record const& b) {
    return a.time_ns != b.time_ns ? a.time_ns < b.time_ns : a.ptr < b.ptr;
  });
  return all;
}

std::string tracking_resource_adaptor::leak_report(std::size_t max_rows) const {
  auto const all = outstanding();
  std::size_t total = 0;
  for (auto const& r : all) total += r.bytes;
  std::string out = "gpumem: " + std::to_string(all.size()) + " outstanding allocation" + (all.size() == 1 ? "" : "s") +
                    ", ";
  append_size(out, total);
  out += '\n';
  std::size_t const rows = std::min(max_rows, all.size());
  for (std::size_t i = 0; i < rows; ++i) {
    auto const& r = all[i];
    out += "  " + fmt::format("{}", r.ptr) + "  ";
    append_size(out, r.bytes);
    out += fmt::format("  stream 0x{:x}  thread {}  device {}  {}  at {}.{:09d}\n", r.stream, r.thread_id, r.device,
                       r.entry_point != nullptr ? r.entry_point : "allocate", r.time_ns / 1'000'000'000,
                       r.time_ns % 1'000'000'000);
    if (!r.stack.empty()) {
      // backtrace_symbols mallocs one block for all lines; free it with free().
      std::unique_ptr<char*, decltype(&std::free)> syms{
          ::backtrace_symbols(r.stack.data(), static_cast<int>(r.stack.size())), &std::free};
      for (std::size_t f = 0; f < r.stack.size(); ++f) {
        out += "      ";
        out += syms ? syms.get()[f] : fmt::format("{}", r.stack[f]);
        out += '\n';
      }
    }
  }
  if (rows < all.size()) out += "  ... and " + std::to_string(all.size() - rows) + " more\n";
  return out;
}

}  // namespace gpumem
