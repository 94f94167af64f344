// Measurement 2: T threads, each on its own non-blocking stream, one shared allocator,
// allocate + free pairs of one size. Each thread does the same number of pairs; the
// rate is all pairs over the makespan (timing.hpp says why, and what else is kept).
#include "builtin_contenders.hpp"
#include "measurements.hpp"
#include "timing.hpp"

#include <cstring>

namespace gpumem_compare {

namespace {

/// Records one control row's samples.
void control_samples(run_context const& ctx, char const* name, int threads, scaling_result const& r) {
  json_object params;
  params.add("size", 0).add("threads", threads);
  ctx.out.sample("scaling", name, params, "pairs_per_s", r.timed.pairs_per_second(threads));
  ctx.out.sample("scaling", name, params, "mean_thread_pairs_per_s", r.timed.mean_thread_rate(threads));
  ctx.out.sample("scaling", name, params, "slowest_over_fastest",
                 r.timed.fastest_thread_s > 0 ? r.timed.slowest_thread_s / r.timed.fastest_thread_s : 0);
}

/// The machine's own ceiling: the same harness, threads doing ~60 ns of dependent
/// arithmetic per "pair" and touching no shared memory. No allocator can scale better
/// than this on the same cores (all-core clocks, a VM's vCPUs). A dependent chain
/// leaves most of a core's execution ports idle, so two hyperthreads of one core
/// barely slow each other down on it.
void cpu_control(run_context const& ctx, int threads, double target) {
  auto make_pair = [](int i) {
    return [x = std::uint64_t{0x9e3779b97f4a7c15} + static_cast<std::uint64_t>(i)]() mutable {
      for (int k = 0; k < 32; ++k) {
        x ^= x << 13U;
        x ^= x >> 7U;
        x ^= x << 17U;
      }
      asm volatile("" : "+r"(x));  // keep the chain: its result is never read
      return true;
    };
  };
  control_samples(ctx, cpu_control_name, threads, thread_scaling(threads, make_pair, target));
}

/// The same with eight independent chains: enough parallel work to fill a core's
/// ALUs, as an allocator's pair (loads, compares, a locked instruction) partly does.
/// Where two vCPUs are hyperthreads of one core, this row scales to about half the
/// first one's ratio at as many threads as vCPUs; where they are whole cores, the two
/// rows agree.
void cpu_throughput_control(run_context const& ctx, int threads, double target) {
  auto make_pair = [](int i) {
    std::uint64_t seed = 0x9e3779b97f4a7c15 + static_cast<std::uint64_t>(i);
    return [l0 = seed, l1 = seed + 1, l2 = seed + 2, l3 = seed + 3, l4 = seed + 4, l5 = seed + 5, l6 = seed + 6,
            l7 = seed + 7]() mutable {
      for (int k = 0; k < 12; ++k) {
        l0 ^= l0 << 13U, l1 ^= l1 << 13U, l2 ^= l2 << 13U, l3 ^= l3 << 13U;
        l4 ^= l4 << 13U, l5 ^= l5 << 13U, l6 ^= l6 << 13U, l7 ^= l7 << 13U;
        l0 ^= l0 >> 7U, l1 ^= l1 >> 7U, l2 ^= l2 >> 7U, l3 ^= l3 >> 7U;
        l4 ^= l4 >> 7U, l5 ^= l5 >> 7U, l6 ^= l6 >> 7U, l7 ^= l7 >> 7U;
        asm volatile("" : "+r"(l0), "+r"(l1), "+r"(l2), "+r"(l3), "+r"(l4), "+r"(l5), "+r"(l6), "+r"(l7));
      }
      return true;
    };
  };
  control_samples(ctx, cpu_throughput_control_name, threads, thread_scaling(threads, make_pair, target));
}

}  // namespace

void measure_scaling(run_context const& ctx) {
  double const target = ctx.target(0.04, 0.01);
  for (int const threads : ctx.options.scaling_threads) cpu_control(ctx, threads, target);
  for (int const threads : ctx.options.scaling_threads) cpu_throughput_control(ctx, threads, target);
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
