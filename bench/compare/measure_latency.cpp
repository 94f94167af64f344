// Measurement 1: allocate + free pairs on a warm allocator, one thread, one
// non-blocking stream, per size. Host time per pair. Then the same thread alternating
// its pairs between two streams (a compute and a copy stream, say): an allocator that
// hands one stream's free memory to the other orders them with events on every switch.
#include "measurements.hpp"
#include "timing.hpp"

namespace gpumem_compare {

void measure_latency(run_context const& ctx) {
  double const target = ctx.target(0.02, 0.005);
  stream_t const s = ctx.streams[0];
  for (std::uint64_t const size : ctx.options.latency_sizes) {
    for (auto const& kind : ctx.kinds) {
      auto c = ctx.make(kind, "latency");
      if (!c) continue;
      auto pair = [&] {
        void* p = c->allocate(size, s);
        if (p == nullptr) return false;
        c->deallocate(p, size, s);
        return true;
      };
      pair_timing const t = pair_latency(pair, target);
      cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      json_object params;
      params.add("size", size);
      if (t.failed) {
        ctx.out.note("latency", kind.name, "allocation of " + size_label(size) + " failed");
        continue;
      }
      ctx.out.sample("latency", kind.name, params, "ns_per_pair", t.ns_per_pair);
      ctx.out.sample("latency", kind.name, params, "fastest_window_ns_per_pair", t.fastest_window_ns);
    }
  }
  stream_t const other = ctx.streams[1];
  for (std::uint64_t const size : {std::uint64_t{256}, std::uint64_t{1} << 20}) {
    for (auto const& kind : ctx.kinds) {
      auto c = ctx.make(kind, "latency");
      if (!c) continue;
      bool on_first = false;
      auto pair = [&] {
        on_first = !on_first;
        stream_t const st = on_first ? s : other;
        void* p = c->allocate(size, st);
        if (p == nullptr) return false;
        c->deallocate(p, size, st);
        return true;
      };
      pair_timing const t = pair_latency(pair, target);
      ctx.streams.synchronize_all();
      if (t.failed) {
        ctx.out.note("latency", kind.name, "allocation of " + size_label(size) + " on two streams failed");
        continue;
      }
      json_object params;
      params.add("size", size).add("streams", 2);
      ctx.out.sample("latency", kind.name, params, "ns_per_pair", t.ns_per_pair);
    }
  }
}

}  // namespace gpumem_compare
