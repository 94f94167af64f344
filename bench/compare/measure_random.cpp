// Measurement 3a: RMM's "random allocations" shape, on several streams. A fixed-seed
// sequence of operations: while fewer than N allocations were made, allocate with
// probability 73% (size uniform in 1..max bytes, on a random one of 4 streams; never
// past a cap on live bytes), else free a random live allocation on the stream it was
// made on. The sequence is generated before timing (same for every contender); the
// timed loop makes only allocator calls. RMM's own benchmark uses one stream.
#include "builtin_contenders.hpp"
#include "measurements.hpp"
#include "timing.hpp"

#include <algorithm>
#include <cstring>
#include <random>

namespace gpumem_compare {
namespace {

struct random_op {
  bool allocate;
  std::uint32_t slot;
  std::uint32_t stream;
  std::uint64_t bytes;
};

struct random_sequence {
  std::vector<random_op> ops;
  std::uint32_t slots = 0;
  std::uint64_t peak_live = 0;
};

random_sequence generate(std::uint64_t allocations, std::uint64_t max_size, std::uint64_t max_live,
                         std::uint32_t streams, std::uint64_t seed) {
  constexpr int allocation_percent = 73;
  std::mt19937_64 rng{seed};
  std::uniform_int_distribution<int> percent{0, 99};
  std::uniform_int_distribution<std::uint64_t> size_dist{1, max_size};
  std::uniform_int_distribution<std::uint32_t> stream_dist{0, streams - 1};
  random_sequence seq;
  std::vector<std::uint32_t> live;        // slots
  std::vector<std::uint64_t> slot_bytes;  // by slot
  std::vector<std::uint32_t> slot_stream;
  std::uint64_t made = 0, live_bytes = 0;
  for (std::uint64_t i = 0; i < 2 * allocations; ++i) {
    std::uint64_t const size = size_dist(rng);
    bool alloc = true;
    if (!live.empty()) alloc = percent(rng) < allocation_percent && made < allocations && live_bytes + size < max_live;
    if (alloc) {
      auto const slot = static_cast<std::uint32_t>(slot_bytes.size());
      std::uint32_t const st = stream_dist(rng);
      slot_bytes.push_back(size);
      slot_stream.push_back(st);
      live.push_back(slot);
      seq.ops.push_back({true, slot, st, size});
      ++made;
      live_bytes += size;
      seq.peak_live = std::max(seq.peak_live, live_bytes);
    } else if (!live.empty()) {
      std::uniform_int_distribution<std::size_t> pick{0, live.size() - 1};
      std::size_t const at = pick(rng);
      std::uint32_t const slot = live[at];
      live[at] = live.back();
      live.pop_back();
      seq.ops.push_back({false, slot, slot_stream[slot], slot_bytes[slot]});
      live_bytes -= slot_bytes[slot];
    }
  }
  seq.slots = static_cast<std::uint32_t>(slot_bytes.size());
  return seq;
}

}  // namespace

void measure_random_allocations(run_context const& ctx) {
  constexpr std::uint32_t streams = 4;
  std::uint64_t const n = ctx.options.quick ? 2000 : 10000;
  // RMM caps live bytes at 16000 MiB; a quarter of the free memory leaves room for
  // allocators that reserve up front (RMM's arena takes half of it).
  std::uint64_t const max_live = std::min<std::uint64_t>(std::uint64_t{16000} << 20, query_device_memory().free / 4);
  struct config {
    std::uint64_t max_size;
    std::uint64_t seed;
  };
  for (config const cfg : {config{std::uint64_t{1} << 20, 1}, config{std::uint64_t{64} << 20, 2}}) {
    auto const n_allocs = std::max<std::uint64_t>(
        16, static_cast<std::uint64_t>(static_cast<double>(n) * std::min(1.0, ctx.options.time_scale)));
    random_sequence const seq = generate(n_allocs, cfg.max_size, max_live, streams, cfg.seed);
    json_object params;
    params.add("allocations", n_allocs).add("max_size", cfg.max_size).add("streams", static_cast<int>(streams));
    for (auto const& kind : ctx.kinds) {
      if (ctx.options.quick && std::strcmp(kind.name, reference_contender) == 0) continue;
      auto c = ctx.make(kind, "random");
      if (!c) continue;
      std::vector<void*> ptr(seq.slots, nullptr);
      std::uint64_t failed = 0;
      auto const t0 = bench_clock::now();
      for (random_op const& op : seq.ops) {
        stream_t const s = ctx.streams[op.stream];
        if (op.allocate) {
          ptr[op.slot] = c->allocate(op.bytes, s);
          failed += ptr[op.slot] == nullptr ? 1 : 0;
        } else if (ptr[op.slot] != nullptr) {
          c->deallocate(ptr[op.slot], op.bytes, s);
          ptr[op.slot] = nullptr;
        }
      }
      double const seconds = seconds_between(t0, bench_clock::now());
      for (random_op const& op : seq.ops) {  // what the sequence left live
        if (op.allocate && ptr[op.slot] != nullptr) {
          c->deallocate(ptr[op.slot], op.bytes, ctx.streams[op.stream]);
          ptr[op.slot] = nullptr;
        }
      }
      ctx.streams.synchronize_all();
      memory_usage const u = c->usage();
      ctx.out.sample("random", kind.name, params, "us_per_call", seconds * 1e6 / static_cast<double>(seq.ops.size()));
      ctx.out.sample("random", kind.name, params, "failed", static_cast<double>(failed));
      ctx.out.sample("random", kind.name, params, "peak_live", static_cast<double>(seq.peak_live));
      if (u.known) ctx.out.sample("random", kind.name, params, "peak_reserved", static_cast<double>(u.peak_reserved));
    }
  }
}

}  // namespace gpumem_compare
