#include "replay_plan.hpp"

#include "call_semantics.hpp"
#include "log_reader.hpp"
#include "replay_sequencer.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace gpumem_compare {

replay_plan plan_replay(std::string const& path, std::string name) {
  using namespace gpumem::tools;
  log_reader reader{path};
  if (!reader.readable()) {
    throw std::runtime_error("cannot replay '" + path +
                             "': " + (reader.fatal() ? reader.fatal()->text() : std::string{"unreadable"}));
  }
  replay_plan plan;
  plan.name = std::move(name);
  plan.source = path;
  plan.dialect = std::string{reader.dialect()};

  std::map<replay_stream, std::uint32_t> stream_index;
  auto stream_of = [&](log_event const& e) -> std::uint32_t {
    replay_stream const key = replay_stream_of(e);
    if (key.legacy()) return 0;
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
  std::set<std::uint64_t> threads;
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

  auto plan_event = [&](log_event const& e) {
    if (!e.device_memory()) return;  // pinned host or managed memory: no device allocator serves it
    threads.insert(e.thread_id);
    bool const sync = synchronous_entry(reader.string(e.entry_id));
    switch (e.action) {
      case gpumem::log_action::allocate: {
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
      case gpumem::log_action::allocate_failure:
        if (e.size == 0) break;
        plan.ops.push_back({replay_op::kind::try_allocate, sync, 0, stream_of(e), e.size});
        break;
      case gpumem::log_action::free: {
        if (e.pointer == 0 || e.refused) break;
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
  };
  replay_sequencer order;
  log_event ev, next;
  while (reader.next(ev)) {
    order.push(ev);
    while (order.pop(next, false)) plan_event(next);
  }
  while (order.pop(next, true)) plan_event(next);
  // The log's leaks (allocations alive at exit) stay live to the end: the executor frees them.
  plan.threads = threads.size();
  return plan;
}

}  // namespace gpumem_compare
