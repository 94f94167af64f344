#include "replay_plan.hpp"

#include <gpumem/tools/log_reader.hpp>

#include <algorithm>
#include <map>
#include <queue>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace gpumem_compare {
namespace {

constexpr std::uint64_t legacy_handle = 0x1;
constexpr std::uint64_t per_thread_handle = 0x2;

bool synchronous_entry(std::string_view e) {
  // The cudaMalloc family: memory usable by any stream at once, freed by a synchronizing free.
  return e == "cudaMalloc" || e == "cudaFree" || e == "cudaMallocPitch" || e.starts_with("cuMemAlloc_") ||
         e == "cuMemAlloc" || e.starts_with("cuMemAllocPitch") || e == "cuMemFree" || e.starts_with("cuMemFree_");
}

/// Event indices: each thread's in file order, threads merged by (time, file position).
std::vector<std::uint32_t> merged_order(std::vector<gpumem::tools::log_event> const& ev) {
  std::map<std::uint64_t, std::vector<std::uint32_t>> per_thread;
  for (std::uint32_t i = 0; i < ev.size(); ++i) per_thread[ev[i].thread].push_back(i);
  std::vector<std::vector<std::uint32_t> const*> queues;
  for (auto const& [t, q] : per_thread) queues.push_back(&q);
  using head = std::tuple<std::int64_t, std::uint32_t, std::size_t>;
  std::priority_queue<head, std::vector<head>, std::greater<>> heads;
  std::vector<std::size_t> next(queues.size(), 0);
  for (std::size_t q = 0; q < queues.size(); ++q) heads.emplace(ev[queues[q]->front()].time_ns, queues[q]->front(), q);
  std::vector<std::uint32_t> order;
  order.reserve(ev.size());
  while (!heads.empty()) {
    auto const [t, i, q] = heads.top();
    heads.pop();
    order.push_back(i);
    if (++next[q] < queues[q]->size()) {
      std::uint32_t const n = (*queues[q])[next[q]];
      heads.emplace(ev[n].time_ns, n, q);
    }
  }
  return order;
}

}  // namespace

replay_plan plan_replay(std::string const& path, std::string name) {
  // A benchmark's logs are small: all events are read first, then merged by time.
  gpumem::tools::log_reader reader{path};
  if (!reader.readable()) {
    throw std::runtime_error("cannot replay '" + path +
                             "': " + (reader.fatal() ? reader.fatal()->text() : std::string{"unreadable"}));
  }
  std::vector<gpumem::tools::log_event> events;
  for (gpumem::tools::log_event e; reader.next(e);) events.push_back(e);
  replay_plan plan;
  plan.name = std::move(name);
  plan.source = path;
  plan.dialect = std::string{reader.dialect()};

  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint32_t> stream_index;  // (handle, thread) -> index
  auto stream_of = [&](gpumem::tools::log_event const& e) -> std::uint32_t {
    if (e.stream == 0 || e.stream == legacy_handle) return 0;
    auto const key = std::pair{e.stream, e.stream == per_thread_handle ? e.thread : std::uint64_t{0}};
    auto [it, fresh] = stream_index.try_emplace(key, plan.streams);
    if (fresh) ++plan.streams;
    return it->second;
  };

  struct live_block {
    std::uint32_t slot;
    std::uint64_t bytes;
  };
  std::unordered_map<std::uint64_t, live_block> live;  // log pointer -> slot
  std::vector<std::uint32_t> free_slots;
  std::uint64_t live_bytes = 0;
  std::map<std::uint64_t, bool> threads;
  auto take_slot = [&]() -> std::uint32_t {
    if (!free_slots.empty()) {
      std::uint32_t const s = free_slots.back();
      free_slots.pop_back();
      return s;
    }
    return plan.slots++;
  };
  auto emit_free = [&](live_block const& b, std::uint32_t stream, bool sync) {
    plan.ops.push_back({replay_op::kind::free, sync, b.slot, stream, b.bytes});
    free_slots.push_back(b.slot);
    live_bytes -= b.bytes;
  };

  for (std::uint32_t const i : merged_order(events)) {
    auto const& e = events[i];
    threads[e.thread] = true;
    bool const sync = synchronous_entry(reader.string(e.entry));
    switch (e.kind) {
      case gpumem::tools::event_kind::allocate: {
        if (e.size == 0) break;
        std::uint32_t const st = stream_of(e);
        if (auto it = live.find(e.pointer); it != live.end()) {  // the log lost a free
          emit_free(it->second, st, sync);
          live.erase(it);
        }
        live_block const b{take_slot(), e.size};
        plan.ops.push_back({replay_op::kind::allocate, sync, b.slot, st, e.size});
        live.emplace(e.pointer, b);
        live_bytes += e.size;
        plan.peak_live = std::max(plan.peak_live, live_bytes);
        ++plan.allocations;
        break;
      }
      case gpumem::tools::event_kind::allocate_failure:
        if (e.size == 0) break;
        plan.ops.push_back({replay_op::kind::try_allocate, sync, 0, stream_of(e), e.size});
        break;
      case gpumem::tools::event_kind::free: {
        if (e.pointer == 0) break;
        auto it = live.find(e.pointer);
        if (it == live.end()) {
          ++plan.skipped_frees;
          break;
        }
        emit_free(it->second, stream_of(e), sync);
        live.erase(it);
        break;
      }
    }
  }
  // The log's leaks (allocations alive at exit) stay live to the end: the executor frees them.
  plan.threads = threads.size();
  return plan;
}

}  // namespace gpumem_compare
