// Measurement 4: memory efficiency. Each allocation log (replay_plan.hpp) is replayed
// through every contender on the real device, in log order, streams mapped to real
// streams. Peak reserved is what the allocator reports holding from the device (polled
// after every allocation and taken with its own peak counter), peak live the most
// requested bytes live at once (the same for all). cudaMemGetInfo's used bytes above
// the level before the contender was made are kept as a cross-check, and stand in for
// allocators that cannot tell what they reserve (plain cudaMalloc).
#include "measurements.hpp"
#include "timing.hpp"

#include <algorithm>
#include <string>
#include <string_view>

namespace gpumem_compare {
namespace {

replay_tally run_plan(replay_plan const& plan, contender& c, std::vector<stream_t> const& streams,
                      std::uint64_t used_before) {
  replay_tally t;
  std::vector<void*> slot(plan.slots, nullptr);
  std::chrono::nanoseconds in_calls{};
  auto note_memory = [&] {
    memory_usage const u = c.usage();
    if (u.known) {
      t.reserved_known = true;
      t.peak_reserved = std::max({t.peak_reserved, u.reserved, u.peak_reserved});
    }
    device_memory const m = query_device_memory();
    t.device_used_known = true;
    if (m.used() > used_before) t.peak_device_used = std::max(t.peak_device_used, m.used() - used_before);
  };
  for (replay_op const& op : plan.ops) {
    stream_t const s = streams[op.stream];
    switch (op.what) {
      case replay_op::kind::allocate: {
        auto const t0 = bench_clock::now();
        void* p = op.synchronous ? c.allocate_synchronous(op.bytes, s) : c.allocate(op.bytes, s);
        in_calls += bench_clock::now() - t0;
        ++t.calls;
        if (p == nullptr) {
          ++t.failed;
          break;
        }
        slot[op.slot] = p;
        note_memory();
        break;
      }
      case replay_op::kind::try_allocate: {
        void* p = op.synchronous ? c.allocate_synchronous(op.bytes, s) : c.allocate(op.bytes, s);
        ++t.calls;
        if (p != nullptr) {
          note_memory();
          c.deallocate(p, op.bytes, s);
        }
        break;
      }
      case replay_op::kind::free: {
        void*& p = slot[op.slot];
        if (p == nullptr) break;  // its allocation failed
        auto const t0 = bench_clock::now();
        if (op.synchronous) {
          c.deallocate_synchronous(p, op.bytes, s);
        } else {
          c.deallocate(p, op.bytes, s);
        }
        in_calls += bench_clock::now() - t0;
        ++t.calls;
        p = nullptr;
        break;
      }
    }
  }
  // The log's leaks: freed after the replay, outside the figures.
  for (replay_op const& op : plan.ops) {
    if (op.what == replay_op::kind::allocate && slot[op.slot] != nullptr) {
      c.deallocate(slot[op.slot], op.bytes, streams[op.stream]);
      slot[op.slot] = nullptr;
    }
  }
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  memory_usage const u = c.usage();
  if (u.known) t.peak_reserved = std::max(t.peak_reserved, u.peak_reserved);
  t.host_seconds = std::chrono::duration<double>(in_calls).count();
  return t;
}

/// A contender known to end the process on this log (std::terminate inside it), so
/// it cannot be measured there without losing the rest of the round.
bool aborts_on(contender_kind const& kind, replay_plan const& plan) {
  return std::string_view{kind.name} == "rmm arena" && plan.name == "varlen";
}

}  // namespace

void measure_replay(run_context const& ctx) {
  for (replay_plan const& plan : ctx.options.replays) {
    // The log's streams: index 0 is the legacy stream; the others are created as the
    // program's were (blocking streams, as cudaStreamCreate makes them).
    stream_set created(plan.streams - 1, cudaStreamDefault);
    std::vector<stream_t> streams{nullptr};
    for (std::size_t i = 0; i < created.size(); ++i) streams.push_back(created[i]);
    json_object params;
    params.add("log", plan.name).add("events", static_cast<std::uint64_t>(plan.ops.size()));
    for (auto const& kind : ctx.kinds) {
      if (aborts_on(kind, plan)) {
        ctx.out.note("replay", kind.name,
                     "left out of the " + plan.name +
                         " replay: RMM 26.10's arena throws 'allocation not found' from a free of this log inside a "
                         "noexcept function, which ends the process (and the round for every contender after it)");
        continue;
      }
      cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      std::uint64_t const used_before = query_device_memory().used();
      auto c = ctx.make(kind, "replay");
      if (!c) continue;
      replay_tally const t = run_plan(plan, *c, streams, used_before);
      ctx.out.sample("replay", kind.name, params, "peak_live", static_cast<double>(plan.peak_live));
      if (t.reserved_known)
        ctx.out.sample("replay", kind.name, params, "peak_reserved", static_cast<double>(t.peak_reserved));
      if (t.device_used_known) {
        ctx.out.sample("replay", kind.name, params, "peak_device_used", static_cast<double>(t.peak_device_used));
      }
      ctx.out.sample("replay", kind.name, params, "failed", static_cast<double>(t.failed));
      ctx.out.sample("replay", kind.name, params, "ns_per_call",
                     t.calls > 0 ? t.host_seconds * 1e9 / static_cast<double>(t.calls) : 0);
    }
  }
}

}  // namespace gpumem_compare
