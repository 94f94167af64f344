// Allocate+deallocate pair latency of every resource, 256 B to 1 GiB, on one
// thread and on 16 threads each with its own stream (issue 2 §6).
//
// Each benchmark times `p = allocate(n, s); deallocate(p, n, s);` in a loop on
// a warm resource: the first pair (outside the timed loop) grows a pool/bin, so
// the loop measures the steady state a program sees after warm-up. cuda and
// async are the baselines (cudaMalloc+cudaFree, and the driver's own
// stream-ordered pool). default_chain is the chain the shim builds from the default
// configuration: statistics over a pool over statistics over cuda. The *_sync rows make
// the same pairs with synchronous semantics, as the shim's safe mode makes cudaMalloc
// and cudaFree: served from clean memory, frees reused behind a barrier.
// items_per_second is the aggregate pair rate over all threads, so 16-thread scaling =
// its value / the 1-thread value.
//
//   resource_bench [--benchmark_filter=pool] [--benchmark_min_time=0.2]
#include <gpumem/async_memory_resource.hpp>
#include <gpumem/binning_memory_resource.hpp>
#include <gpumem/call_context.hpp>
#include <gpumem/cuda_memory_resource.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/fixed_size_memory_resource.hpp>
#include <gpumem/pool_memory_resource.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>

#include <benchmark/benchmark.h>

#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace {

constexpr int max_threads = 16;

// Streams and resources live for the whole run: created on first use (not at
// static-init time: no CUDA calls before main), never destroyed mid-run.
struct environment {
  std::array<CUstream, max_threads> streams{};
  gpumem::cuda_memory_resource cuda;
  std::unique_ptr<gpumem::async_memory_resource> async;
  std::unique_ptr<gpumem::pool_memory_resource> pool;
  std::unique_ptr<gpumem::pool_memory_resource> bin_pool;  // binning's upstream for > 1 MiB
  std::unique_ptr<gpumem::binning_memory_resource> binning;
  std::map<std::size_t, std::unique_ptr<gpumem::fixed_size_memory_resource>> fixed;  // by block size
  // default_chain, innermost first
  std::unique_ptr<gpumem::statistics_resource_adaptor> chain_device_stats;
  std::unique_ptr<gpumem::pool_memory_resource> chain_pool;
  std::unique_ptr<gpumem::statistics_resource_adaptor> chain_live_stats;
  std::mutex fixed_mutex;

  environment() {
    GPUMEM_CU_TRY(gpumem::detail::ensure_context());
    auto const& d = gpumem::detail::driver();
    for (auto& s : streams) GPUMEM_CU_TRY(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    async = std::make_unique<gpumem::async_memory_resource>();
    pool = std::make_unique<gpumem::pool_memory_resource>(&cuda, gpumem::pool_options{std::size_t{0}, {}});
    bin_pool = std::make_unique<gpumem::pool_memory_resource>(&cuda, gpumem::pool_options{std::size_t{0}, {}});
    binning = std::make_unique<gpumem::binning_memory_resource>(bin_pool.get(), std::int8_t{8}, std::int8_t{20});
    chain_device_stats = std::make_unique<gpumem::statistics_resource_adaptor>(
        &cuda, gpumem::statistics_resource_adaptor::sharing::every_change);
    chain_pool = std::make_unique<gpumem::pool_memory_resource>(chain_device_stats.get(),
                                                                gpumem::pool_options{std::size_t{0}, {}});
    chain_live_stats = std::make_unique<gpumem::statistics_resource_adaptor>(chain_pool.get());
  }

  gpumem::fixed_size_memory_resource& fixed_for(std::size_t bytes) {
    std::lock_guard lock{fixed_mutex};
    auto& slot = fixed[bytes];
    // One chunk of 16 blocks: 16 threads each holding one block never force growth.
    if (!slot) slot = std::make_unique<gpumem::fixed_size_memory_resource>(&cuda, bytes, std::size_t{max_threads});
    return *slot;
  }
};

environment& env() {
  // Made at the first benchmark run, inside main, and never destroyed: at exit the
  // driver (the simulated device's state) may already be gone, and a pool's
  // destructor would free its slabs into it.
  static environment& e = *new environment;
  return e;
}

enum class kind { cuda, async, pool, binning, fixed_size, default_chain };

gpumem::device_memory_resource& resource_for(kind k, std::size_t bytes) {
  auto& e = env();
  switch (k) {
    case kind::cuda: return e.cuda;
    case kind::async: return *e.async;
    case kind::pool: return *e.pool;
    case kind::binning: return *e.binning;
    case kind::fixed_size: return e.fixed_for(bytes);
    case kind::default_chain: return *e.chain_live_stats;
  }
  return e.cuda;
}

void pair(benchmark::State& state, kind k, bool synchronous = false) {
  auto const bytes = static_cast<std::size_t>(state.range(0));
  gpumem::stream_ref stream{};
  // cudaMalloc/cudaFree in safe mode: the whole loop under one context, as each call
  // of the shim's would be (the context is a thread-local, set per call there).
  std::optional<gpumem::scoped_call_context> sync;
  if (synchronous) sync.emplace("cudaMalloc", -1, true);
  try {
    auto& mr = resource_for(k, bytes);
    stream = gpumem::stream_ref{env().streams[static_cast<std::size_t>(state.thread_index()) % max_threads]};
    mr.deallocate(mr.allocate(bytes, stream), bytes, stream);  // warm: grow once, untimed
    for (auto _ : state) {
      void* p = mr.allocate(bytes, stream);
      benchmark::DoNotOptimize(p);
      mr.deallocate(p, bytes, stream);
    }
  } catch (std::exception const& ex) {
    state.SkipWithError(ex.what());
    return;
  }
  state.SetItemsProcessed(state.iterations());
  // The async resource queues frees on the stream; drain so one benchmark's
  // queue does not bill the next.
  GPUMEM_CU_TRY(gpumem::detail::driver().cuStreamSynchronize(stream.get()));
}

void sizes(benchmark::internal::Benchmark* b) {
  for (long s : {256L, 4L << 10, 64L << 10, 1L << 20, 64L << 20, 1L << 30}) b->Arg(s);
}

#define GPUMEM_PAIR_BENCH(name)                                  \
  void BM_##name(benchmark::State& s) { pair(s, kind::name); }   \
  BENCHMARK(BM_##name)->Apply(sizes)->UseRealTime()->Threads(1); \
  BENCHMARK(BM_##name)->Apply(sizes)->UseRealTime()->Threads(max_threads)

GPUMEM_PAIR_BENCH(cuda);
GPUMEM_PAIR_BENCH(async);
GPUMEM_PAIR_BENCH(pool);
GPUMEM_PAIR_BENCH(binning);
GPUMEM_PAIR_BENCH(fixed_size);
GPUMEM_PAIR_BENCH(default_chain);

#define GPUMEM_SYNC_PAIR_BENCH(name)                                        \
  void BM_##name##_sync(benchmark::State& s) { pair(s, kind::name, true); } \
  BENCHMARK(BM_##name##_sync)->Apply(sizes)->UseRealTime()->Threads(1);     \
  BENCHMARK(BM_##name##_sync)->Apply(sizes)->UseRealTime()->Threads(max_threads)

GPUMEM_SYNC_PAIR_BENCH(pool);
GPUMEM_SYNC_PAIR_BENCH(binning);
GPUMEM_SYNC_PAIR_BENCH(default_chain);

}  // namespace

BENCHMARK_MAIN();
