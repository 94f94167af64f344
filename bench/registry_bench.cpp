// The shim's pointer registry (src/shim/serve/allocation_registry) on the CPU: what every
// interposed allocation+free pair pays for it, and what pointer queries cost.
//
//   pair_same            insert + take of one address again and again (a pool's
//                        LIFO reuse), per thread its own address
//   pair_rotating        insert + take over 4096 addresses of each thread's own
//   pair_window          each thread keeps 1024 allocations live: insert a new
//                        address, take the oldest (addresses come back only after
//                        65536 pairs: tombstones are created and evicted)
//   find_base            find_containing(base) of one of 16384 live allocations
//   find_interior        find_containing(base + offset), nothing changing
//   find_interior_churn  an insert+take pair, then an interior lookup (the index
//                        has a change to take in before every lookup)
//   find_unknown         find_containing of an address no allocation holds (a host
//                        pointer given to cudaPointerGetAttributes)
//
// Pair benchmarks run on 1, 2, 4, 8 and 16 threads against one shared registry;
// time is real time per pair per thread, items_per_second the pairs of all threads.
// Only the registry's public interface is used, so the same file measures an older
// registry built from another tree.
//
// An idle thread runs throughout: the shim always lives in a multi-threaded process
// (CUDA starts threads of its own), and glibc's mutexes skip their atomic
// instructions while a process has a single thread, which would flatter any
// registry built on std::mutex.
//
//   registry_bench [--benchmark_min_time=0.5] [--benchmark_repetitions=3]
#include "serve/allocation_registry.hpp"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace {

using gpumem::shim::alloc_kind;
using gpumem::shim::allocation;
using gpumem::shim::allocation_registry;

allocation_registry& shared_registry() {
  static auto* const r = new allocation_registry{};
  return *r;
}

allocation block(std::size_t bytes) {
  allocation a;
  a.bytes = bytes;
  a.kind = alloc_kind::sync;
  a.device = 0;
  a.entry = "cudaMalloc";
  return a;
}

/// Each thread's own address range (a pool slab per thread, 64 GiB apart).
std::uintptr_t thread_base(benchmark::State const& state) {
  return std::uintptr_t{0x100000000000} + static_cast<std::uintptr_t>(state.thread_index()) * (std::uintptr_t{1} << 36);
}

/// insert + take of address(i), an allocation of `bytes`, for the i-th pair.
template <typename Address>
void pairs(benchmark::State& state, std::size_t bytes, Address address) {
  auto& r = shared_registry();
  allocation const a = block(bytes);
  allocation out;
  std::uintptr_t i = 0;
  for (auto _ : state) {
    std::uintptr_t const p = address(i++);
    r.insert(p, a);
    benchmark::DoNotOptimize(r.take(p, out));
  }
  state.SetItemsProcessed(state.iterations());
}

void pair_same(benchmark::State& state) {
  std::uintptr_t const p = thread_base(state);
  pairs(state, 1 << 20, [p](std::uintptr_t) { return p; });
}

void pair_rotating(benchmark::State& state) {
  std::uintptr_t const base = thread_base(state);
  pairs(state, 4096, [base](std::uintptr_t i) { return base + (i % 4096) * 4096; });
}

void pair_window(benchmark::State& state) {
  auto& r = shared_registry();
  std::uintptr_t const base = thread_base(state);
  constexpr std::uintptr_t window = 1024;
  constexpr std::uintptr_t range = 65536;
  allocation const a = block(2048);
  allocation out;
  for (std::uintptr_t i = 0; i < window; ++i) r.insert(base + i * 2048, a);
  std::uintptr_t next = window;
  for (auto _ : state) {
    r.insert(base + (next % range) * 2048, a);
    benchmark::DoNotOptimize(r.take(base + ((next - window) % range) * 2048, out));
    ++next;
  }
  for (std::uintptr_t i = next - window; i < next; ++i) (void)r.take(base + (i % range) * 2048, out);
  state.SetItemsProcessed(state.iterations());
}

/// 16384 live allocations of 4 KiB to 4 MiB, 8 MiB apart, for the lookups.
struct population {
  std::vector<std::uintptr_t> bases;
  std::vector<std::size_t> sizes;
  explicit population(allocation_registry& r) {
    for (std::uintptr_t i = 0; i < 16384; ++i) {
      std::uintptr_t const p = std::uintptr_t{0x500000000000} + i * (8 << 20);
      std::size_t const bytes = std::size_t{4096} << (i % 11);
      r.insert(p, block(bytes));
      bases.push_back(p);
      sizes.push_back(bytes);
    }
  }
};

/// find_containing(probe(pop, i)) for the i-th lookup, among the population; with
/// `churn`, an insert+take pair of another address before each lookup.
template <typename Probe>
void lookups(benchmark::State& state, Probe probe, bool churn = false) {
  auto const owner = std::make_unique<allocation_registry>();
  auto& r = *owner;
  population const pop{r};
  allocation const a = block(4096);
  allocation out;
  std::size_t i = 0;
  for (auto _ : state) {
    if (churn) {
      std::uintptr_t const p = std::uintptr_t{0x100000000000} + (i % 4096) * 4096;
      r.insert(p, a);
      benchmark::DoNotOptimize(r.take(p, out));
    }
    benchmark::DoNotOptimize(r.find_containing(probe(pop, i++)));
  }
  state.SetItemsProcessed(state.iterations());
}

/// The k-th allocation, spread over the population (not in address order).
std::size_t spread(population const& pop, std::size_t i) { return (i * 7919) % pop.bases.size(); }

std::uintptr_t interior(population const& pop, std::size_t i) {
  std::size_t const k = spread(pop, i);
  return pop.bases[k] + pop.sizes[k] / 2 + 256;
}

void find_base(benchmark::State& state) {
  lookups(state, [](population const& pop, std::size_t i) { return pop.bases[i % pop.bases.size()]; });
}

void find_interior(benchmark::State& state) { lookups(state, interior); }

void find_interior_churn(benchmark::State& state) { lookups(state, interior, true); }

void find_unknown(benchmark::State& state) {
  // Between allocations: past each one's end, before the next base.
  lookups(state, [](population const& pop, std::size_t i) { return pop.bases[spread(pop, i)] + (6 << 20); });
}

}  // namespace

BENCHMARK(pair_same)->ThreadRange(1, 16)->UseRealTime();
BENCHMARK(pair_rotating)->ThreadRange(1, 16)->UseRealTime();
BENCHMARK(pair_window)->ThreadRange(1, 16)->UseRealTime();
BENCHMARK(find_base);
BENCHMARK(find_interior);
BENCHMARK(find_interior_churn);
BENCHMARK(find_unknown);

int main(int argc, char** argv) {
  std::promise<void> done;
  std::thread idle{[f = done.get_future()] { f.wait(); }};
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  done.set_value();
  idle.join();
  return 0;
}
