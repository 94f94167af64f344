// Measurement 3b: RMM's "multi-stream allocations" shape. K kernels round-robin over S
// streams; before each launch an 8-byte buffer is allocated on that kernel's stream,
// the kernel writes it, and the buffer is freed on the same stream right after the
// launch; then the device is synchronized. An allocator that keeps streams apart costs
// ceil(K/S) kernel durations per iteration; one that makes a stream wait for memory
// another stream freed (while that stream's kernel still runs) serializes them.
// "prewarm": each stream allocated and freed one buffer before timing, as in RMM's
// benchmark. The first iteration is kept apart: that is where memory moves between
// streams.
#include "builtin_contenders.hpp"
#include "measurements.hpp"
#include "timing.hpp"

#include <algorithm>
#include <cstring>

namespace gpumem_compare {
namespace {

constexpr std::size_t buffer_bytes = 8;

/// Mean duration of one spin on an otherwise idle stream.
double kernel_seconds(run_context const& ctx, double spin) {
  void* scratch = nullptr;
  cuda_check(cudaMalloc(&scratch, 256), "cudaMalloc(scratch)");
  stream_t const s = ctx.streams[0];
  ctx.spin.launch(s, scratch, spin);  // first launch loads the module lazily
  cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  constexpr int n = 8;
  auto const t0 = bench_clock::now();
  for (int i = 0; i < n; ++i) ctx.spin.launch(s, scratch, spin);
  cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  double const t = seconds_between(t0, bench_clock::now()) / n;
  cuda_check(cudaFree(scratch), "cudaFree(scratch)");
  return t;
}

}  // namespace

void measure_multi_stream(run_context const& ctx) {
  double const spin = ctx.target(200e-6, 100e-6);
  int const iterations = ctx.options.quick ? 3 : 6;
  constexpr int kernels = 16;
  double const t_kernel = kernel_seconds(ctx, spin);
  ctx.out.note("multistream", "", "the kernel: " + ctx.spin.how());
  json_object kparams;
  kparams.add("kernels", kernels);
  ctx.out.sample("multistream", "(kernel alone)", kparams, "kernel_us", t_kernel * 1e6);

  for (int const streams : {1, 4, 16}) {
    for (bool const prewarm : {false, true}) {
      json_object params;
      params.add("streams", streams).add("kernels", kernels).add("prewarm", prewarm);
      double const ideal = t_kernel * ((kernels + streams - 1) / streams);
      for (auto const& kind : ctx.kinds) {
        if (std::strcmp(kind.name, reference_contender) == 0) continue;  // cudaFree synchronizes: nothing to overlap
        auto c = ctx.make(kind, "multistream");
        if (!c) continue;
        if (prewarm) {
          std::vector<void*> held;
          for (int i = 0; i < streams; ++i)
            held.push_back(c->allocate(buffer_bytes, ctx.streams[static_cast<std::size_t>(i)]));
          for (int i = 0; i < streams; ++i) {
            if (held[static_cast<std::size_t>(i)] != nullptr) {
              c->deallocate(held[static_cast<std::size_t>(i)], buffer_bytes, ctx.streams[static_cast<std::size_t>(i)]);
            }
          }
          cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        }
        std::uint64_t failed = 0;
        std::vector<double> times;
        for (int it = 0; it < iterations; ++it) {
          auto const t0 = bench_clock::now();
          for (int k = 0; k < kernels; ++k) {
            stream_t const s = ctx.streams[static_cast<std::size_t>(k % streams)];
            void* p = c->allocate(buffer_bytes, s);
            if (p == nullptr) {
              ++failed;
              continue;
            }
            ctx.spin.launch(s, p, spin);
            c->deallocate(p, buffer_bytes, s);
          }
          cuda_check(cudaDeviceSynchronize(),
                     "cudaDeviceSynchronize (a kernel failed: bad memory from the allocator?)");
          times.push_back(seconds_between(t0, bench_clock::now()));
        }
        if (failed > 0) {
          ctx.out.note("multistream", kind.name, std::to_string(failed) + " allocations failed");
          continue;
        }
        double rest = 0;
        for (std::size_t i = 1; i < times.size(); ++i) rest += times[i];
        rest /= static_cast<double>(std::max<std::size_t>(1, times.size() - 1));
        ctx.out.sample("multistream", kind.name, params, "us_per_iteration", rest * 1e6);
        ctx.out.sample("multistream", kind.name, params, "first_iteration_us", times.front() * 1e6);
        ctx.out.sample("multistream", kind.name, params, "over_ideal", rest / ideal);
      }
    }
  }
}

}  // namespace gpumem_compare
