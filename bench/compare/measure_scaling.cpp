// Measurement 2: T threads, each on its own non-blocking stream, one shared allocator,
// allocate + free pairs of one size. Each thread does the same number of pairs; the
// rate is all pairs over the makespan (timing.hpp says why, and what else is kept).
#include "builtin_contenders.hpp"
#include "measurements.hpp"
#include "timing.hpp"

#include <cstring>

namespace gpumem_compare {

void measure_scaling(run_context const& ctx) {
  double const target = ctx.target(0.04, 0.01);
  for (std::uint64_t const size : ctx.options.scaling_sizes) {
    for (int const threads : ctx.options.scaling_threads) {
      for (auto const& kind : ctx.kinds) {
        if (std::strcmp(kind.name, reference_contender) == 0) continue;  // milliseconds a pair at 1 GiB
        auto c = ctx.make(kind, "scaling");
        if (!c) continue;
        contender* const mr = c.get();
        auto make_pair = [&](int i) {
          static_cast<void>(cudaSetDevice(0));  // each worker thread works on device 0
          stream_t const s = ctx.streams[static_cast<std::size_t>(i)];
          return [mr, s, size] {
            void* p = mr->allocate(size, s);
            if (p == nullptr) return false;
            mr->deallocate(p, size, s);
            return true;
          };
        };
        scaling_result const r = thread_scaling(threads, make_pair, target);
        ctx.streams.synchronize_all();
        if (r.timed.failed || r.cold.failed) {
          ctx.out.note("scaling", kind.name,
                       "allocation of " + size_label(size) + " failed with " + std::to_string(threads) + " threads");
          continue;
        }
        json_object params;
        params.add("size", size).add("threads", threads);
        ctx.out.sample("scaling", kind.name, params, "pairs_per_s", r.timed.pairs_per_second(threads));
        ctx.out.sample("scaling", kind.name, params, "mean_thread_pairs_per_s", r.timed.mean_thread_rate(threads));
        ctx.out.sample("scaling", kind.name, params, "slowest_over_fastest",
                       r.timed.fastest_thread_s > 0 ? r.timed.slowest_thread_s / r.timed.fastest_thread_s : 0);
        ctx.out.sample("scaling", kind.name, params, "cold_pairs_per_s", r.cold.pairs_per_second(threads));
      }
    }
  }
}

}  // namespace gpumem_compare
