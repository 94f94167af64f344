// Measurement 1: allocate + free pairs on a warm allocator, one thread, one
// non-blocking stream, per size. Host time per pair.
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
    }
  }
}

}  // namespace gpumem_compare
