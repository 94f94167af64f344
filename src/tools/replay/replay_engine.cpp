#include "replay_engine.hpp"

#include <gpumem/call_context.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/error.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>
#include <gpumem/stream.hpp>

#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <map>
#include <queue>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace gpumem::tools {

std::vector<std::uint32_t> replay_order(parsed_log const& log) {
  auto const& events = log.events;
  // Per log thread, its events in file order.
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> per_thread;
  for (std::uint32_t i = 0; i < events.size(); ++i) per_thread[events[i].thread].push_back(i);
  std::vector<std::vector<std::uint32_t> const*> queues;
  queues.reserve(per_thread.size());
  for (auto const& [thread, q] : per_thread) queues.push_back(&q);

  // Merge by (time, file position): equal times keep file order.
  using head = std::tuple<std::int64_t, std::uint32_t, std::size_t>;  // time, event, queue
  std::priority_queue<head, std::vector<head>, std::greater<>> heads;
  std::vector<std::size_t> next(queues.size(), 0);
  for (std::size_t q = 0; q < queues.size(); ++q) {
    std::uint32_t const first = queues[q]->front();
    heads.emplace(events[first].time_ns, first, q);
  }
  std::vector<std::uint32_t> order;
  order.reserve(events.size());
  while (!heads.empty()) {
    auto const [t, ev, q] = heads.top();
    heads.pop();
    order.push_back(ev);
    if (++next[q] < queues[q]->size()) {
      std::uint32_t const n = (*queues[q])[next[q]];
      heads.emplace(events[n].time_ns, n, q);
    }
  }
  return order;
}

namespace {

/// The log's streams as replay streams: created on first use, destroyed at the end.
class stream_table {
 public:
  stream_table() = default;
  stream_table(stream_table const&) = delete;
  stream_table& operator=(stream_table const&) = delete;
  ~stream_table() {
    auto const& drv = detail::driver();
    for (auto const& [key, s] : created_) {
      if (drv.cuStreamDestroy != nullptr) static_cast<void>(drv.cuStreamDestroy(s));
    }
  }

  /// Throws cuda_error if a stream cannot be created.
  stream_ref get(std::uint64_t log_stream, std::uint64_t thread) {
    if (log_stream == 0) return stream_ref{};
    if (log_stream == legacy_stream_handle) return stream_ref{reinterpret_cast<CUstream>(legacy_stream_handle)};
    // The per-thread default stream is one stream per thread.
    auto const key = log_stream == per_thread_stream_handle ? std::pair{log_stream, thread} : std::pair{log_stream, std::uint64_t{0}};
    auto it = created_.find(key);
    if (it == created_.end()) {
      CUstream s = nullptr;
      GPUMEM_CU_TRY(detail::driver().cuStreamCreate(&s, CU_STREAM_DEFAULT));
      it = created_.emplace(key, s).first;
    }
    return stream_ref{it->second};
  }

 private:
  std::map<std::pair<std::uint64_t, std::uint64_t>, CUstream> created_;
};

bool is_synchronous_free(std::string_view entry) noexcept {
  return entry == "cudaFree" || entry == "cuMemFree" || entry == "cuMemFree_v2";
}

struct live_block {
  void* p;
  std::size_t size;
};

}  // namespace

replay_result replay(parsed_log const& log, std::vector<std::uint32_t> const& order, config::settings const& s,
                     std::string name, int device) {
  replay_result r;
  r.name = std::move(name);
  using clock = std::chrono::steady_clock;
  std::chrono::nanoseconds alloc_time{}, free_time{};
  try {
    if (CUresult const c = detail::ensure_context(); c != CUDA_SUCCESS) {
      r.error = fmt::format("no CUDA context: {}", result_name(c));
      return r;
    }
    // Streams outlive the chain: the chain's destructor may still name them.
    stream_table streams;
    auto chain = config::build_chain(s, device);
    r.chain = chain->describe();
    auto& top = chain->top();
    std::unordered_map<std::uint64_t, live_block> live;  // log pointer -> replay block
    std::uint64_t live_bytes = 0, peak_seen = 0;

    auto allocate = [&](log_event const& ev) -> void* {
      stream_ref const st = streams.get(ev.stream, ev.thread);
      scoped_call_context const ctx{log.string(ev.entry).empty() ? nullptr : log.string(ev.entry).data(), device};
      auto const t0 = clock::now();
      void* p = nullptr;
      try {
        p = top.allocate(ev.size, st);
      } catch (gpumem::bad_alloc const&) {
        alloc_time += clock::now() - t0;
        ++r.failed;
        return nullptr;
      }
      alloc_time += clock::now() - t0;
      ++r.allocations;
      return p;
    };
    auto deallocate = [&](live_block const& b, log_event const& ev) {
      stream_ref const st = streams.get(ev.stream, ev.thread);
      std::string_view const entry = log.string(ev.entry);
      scoped_call_context const ctx{entry.empty() ? nullptr : entry.data(), device, is_synchronous_free(entry)};
      auto const t0 = clock::now();
      top.deallocate(b.p, b.size, st);
      free_time += clock::now() - t0;
      ++r.frees;
      live_bytes -= b.size;
    };

    for (std::uint32_t const i : order) {
      log_event const& ev = log.events[i];
      switch (ev.action) {
        case log_action::allocate: {
          if (ev.size == 0) break;
          void* p = allocate(ev);
          if (p == nullptr) break;
          auto const [it, inserted] = live.try_emplace(ev.pointer, live_block{p, ev.size});
          if (!inserted) {  // the log lost a free: release the older block now
            deallocate(it->second, ev);
            it->second = live_block{p, ev.size};
          }
          live_bytes += ev.size;
          if (live_bytes > peak_seen) {
            peak_seen = live_bytes;
            r.fragmentation_at_peak = chain->info().fragmentation();
          }
          break;
        }
        case log_action::allocate_failure: {
          if (ev.size == 0) break;
          if (void* p = allocate(ev)) {
            live_bytes += ev.size;
            deallocate(live_block{p, ev.size}, ev);
          }
          break;
        }
        case log_action::free: {
          if (ev.pointer == 0) break;
          auto const it = live.find(ev.pointer);
          if (it == live.end()) {
            ++r.skipped_frees;
            break;
          }
          deallocate(it->second, ev);
          live.erase(it);
          break;
        }
      }
    }
    // The log's leaks: give them back so the chain ends clean.
    for (auto const& [ptr, b] : live) top.deallocate(b.p, b.size, stream_ref{});
    live.clear();
    if (auto const sync = detail::driver().cuCtxSynchronize) GPUMEM_CU_TRY(sync());

    auto const& dev = chain->device_stats();
    r.peak_reserved = static_cast<std::uint64_t>(dev.bytes().peak);
    r.upstream_calls = static_cast<std::uint64_t>(dev.allocations().total);
    r.peak_live = static_cast<std::uint64_t>(chain->live_stats().bytes().peak);
  } catch (std::exception const& e) {
    r.error = e.what();
  }
  if (r.allocations + r.failed > 0) {
    r.mean_allocate_ns = static_cast<double>(alloc_time.count()) / static_cast<double>(r.allocations + r.failed);
  }
  if (r.frees > 0) r.mean_free_ns = static_cast<double>(free_time.count()) / static_cast<double>(r.frees);
  return r;
}

}  // namespace gpumem::tools
