// gpumem_compare_shim: a plain CUDA program (shared runtime, nothing of gpumem linked)
// timing cudaMalloc+cudaFree and cudaMallocAsync+cudaFreeAsync pairs, their scaling
// over threads, and replaying allocation logs through the entry points the log names;
// with --only host,... the host's speed (host_probe.hpp) before and after the timings.
// scripts/bench-compare runs it without gpumem and under LD_PRELOAD=libgpumem_shim.so
// (safe and stream mode), interleaved with gpumem_compare's rounds.
//
//   gpumem_compare_shim --label NAME [--expect-shim|--expect-no-shim] [--out FILE]
//                       [--rep N] [--quick] [--only LIST] [--replay NAME=LOG]...   (--help: all)
//
// Row names are "<label>: cudaMalloc" and "<label>: cudaMallocAsync" (the pair each
// stands for); the replay row is "<label>". Each log is replayed in a process of its
// own (replay_each_log_alone), so the shim's pool starts empty for it.
#include "device.hpp"
#include "host_probe.hpp"
#include "options.hpp"
#include "replay_plan.hpp"
#include "samples.hpp"
#include "timing.hpp"

#include "command_line.hpp"
#include "gpumem_shim.h"

#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace gpumem_compare;

using stats_fn = int (*)(gpumem_shim_stats*);
using describe_fn = int (*)(int, char*, unsigned long);

/// The shim's query API, if the shim is loaded (looked up, never linked).
struct shim_probe {
  stats_fn stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "gpumem_shim_get_stats"));
  describe_fn describe = reinterpret_cast<describe_fn>(dlsym(RTLD_DEFAULT, "gpumem_shim_describe_chain"));
  [[nodiscard]] bool loaded() const noexcept { return stats != nullptr; }
  [[nodiscard]] gpumem_shim_stats read() const {
    gpumem_shim_stats s{};
    if (stats != nullptr) stats(&s);
    return s;
  }
  [[nodiscard]] std::string chain() const {
    char buf[512] = {};
    if (describe == nullptr || describe(0, buf, sizeof buf) < 0) return {};
    return buf;
  }
};

/// One allocation family: how a pair is made.
struct family {
  char const* name;  ///< "cudaMalloc" or "cudaMallocAsync"
  bool async;
};
constexpr family families[] = {{"cudaMalloc", false}, {"cudaMallocAsync", true}};  // sync first, then async

bool one_pair(family f, std::size_t bytes, cudaStream_t s) {
  void* p = nullptr;
  if (f.async) {
    if (cudaMallocAsync(&p, bytes, s) != cudaSuccess) return false;
    return cudaFreeAsync(p, s) == cudaSuccess;
  }
  if (cudaMalloc(&p, bytes) != cudaSuccess) return false;
  return cudaFree(p) == cudaSuccess;
}

struct settings {
  std::string label;
  bool quick = false;
  double time_scale = 1.0;
  std::vector<std::uint64_t> latency_sizes, scaling_sizes;
  std::vector<int> threads;
  std::vector<replay_plan> replays;
  [[nodiscard]] double target(double full, double quick_s) const { return (quick ? quick_s : full) * time_scale; }
  [[nodiscard]] std::string row(family f) const { return label + ": " + f.name; }
};

struct options {
  common_options common;
  std::string label;
  bool expect_shim = false, expect_no_shim = false;
};

options parse_args(int argc, char** argv) {
  options o;
  CLI::App app{
      "A plain CUDA program (nothing of gpumem linked) timing cudaMalloc+cudaFree and cudaMallocAsync+"
      "cudaFreeAsync pairs, their scaling over threads, and replays of allocation logs through the entry points "
      "they name; run with and without LD_PRELOAD=libgpumem_shim.so.",
      "gpumem_compare_shim"};
  app.add_option("--label", o.label, "row prefix: plain, shim safe, shim stream ...")->type_name("NAME")->required();
  auto* shim = app.add_flag("--expect-shim", o.expect_shim, "fail unless libgpumem_shim.so is loaded and active");
  app.add_flag("--expect-no-shim", o.expect_no_shim, "fail if it is loaded")->excludes(shim);
  add_common_options(app, o.common, {"host", "latency", "scaling", "replay"});
  gpumem::tools::parse_command_line(app, argc, argv);
  return o;
}

/// Whether this process replays one log and does nothing else (see replay_each_log_alone).
bool replays_one_log_only(common_options const& c) {
  return c.replay_specs.size() == 1 && c.only == std::vector<std::string>{"replay"};
}

/// Replays each log in a process of its own: this program again, told to replay that
/// log only. The shim's pool keeps all it ever grew to, so in one process a replay's
/// peak reserved would count what the pair measurements or an earlier log left in
/// it; in gpumem_compare each contender starts empty for each log, and so must the
/// shim. Called before this process makes any CUDA call, so that it holds no device
/// memory meanwhile. Returns what went wrong, per log.
std::vector<std::string> replay_each_log_alone(options const& o) {
  std::vector<std::string> failed;
  char scale[32];
  std::snprintf(scale, sizeof scale, "%.17g", o.common.time_scale);
  for (auto const& spec : o.common.replay_specs) {
    std::vector<std::string> args{"gpumem_compare_shim",
                                  "--label",
                                  o.label,
                                  "--rep",
                                  std::to_string(o.common.rep),
                                  "--time-scale",
                                  scale,
                                  "--only",
                                  "replay",
                                  "--replay",
                                  spec};
    if (o.common.quick) args.emplace_back("--quick");
    if (o.expect_shim) args.emplace_back("--expect-shim");
    if (o.expect_no_shim) args.emplace_back("--expect-no-shim");
    if (!o.common.out_path.empty()) args.insert(args.end(), {"--out", o.common.out_path});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(nullptr);  // the child appends to the same output
    pid_t pid = 0;
    int status = 0;
    if (int const err = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ); err != 0) {
      failed.push_back("replay " + spec + ": cannot start a process for it: " + std::strerror(err));
    } else if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      failed.push_back("replay " + spec + ": its process failed (wait status " + std::to_string(status) + ")");
    }
  }
  return failed;
}

/// The host's speed now (host_probe.hpp), as samples of the "host" measurement:
/// `when` tells the probe before the timed measurements from the one after them.
void host(settings const& st, sample_writer& out, char const* when) {
  host_speed const h = probe_host_speed();
  json_object params;
  params.add("when", when);
  out.sample("host", st.label, params, "alu_ns", h.alu_ns);
  out.sample("host", st.label, params, "issue_ns", h.issue_ns);
  out.sample("host", st.label, params, "cache_ns", h.cache_ns);
  out.sample("host", st.label, params, "memory_ns", h.memory_ns);
}

void latency(settings const& st, sample_writer& out, stream_set const& streams) {
  // Times `pair` (family f, `size` bytes, over `stream_count` streams) and writes its
  // sample, or a note when an allocation failed.
  auto const measure = [&](family f, std::uint64_t size, int stream_count, auto&& pair) {
    pair_timing const t = pair_latency(pair, st.target(0.02, 0.005));
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (t.failed) {
      static_cast<void>(cudaGetLastError());
      out.note("latency", st.row(f),
               "allocation of " + size_label(size) + (stream_count > 1 ? " on two streams" : "") + " failed");
      return;
    }
    json_object params;
    params.add("size", size);
    if (stream_count > 1) params.add("streams", stream_count);
    out.sample("latency", st.row(f), params, "ns_per_pair", t.ns_per_pair);
    if (stream_count == 1) out.sample("latency", st.row(f), params, "fastest_window_ns_per_pair", t.fastest_window_ns);
  };
  for (std::uint64_t const size : st.latency_sizes) {
    for (family const f : families) measure(f, size, 1, [&] { return one_pair(f, size, streams[0]); });
  }
  // The stream-ordered pairs again, one thread taking turns between two streams (a
  // compute and a copy stream, say), as gpumem_compare's latency measurement does.
  family const stream_ordered = families[1];
  for (std::uint64_t const size : {std::uint64_t{256}, std::uint64_t{1} << 20}) {
    bool on_first = false;
    measure(stream_ordered, size, 2, [&] {
      on_first = !on_first;
      return one_pair(stream_ordered, size, on_first ? streams[0] : streams[1]);
    });
  }
}

void scaling(settings const& st, sample_writer& out, stream_set const& streams) {
  for (std::uint64_t const size : st.scaling_sizes) {
    for (int const threads : st.threads) {
      for (family const f : families) {
        auto make_pair = [&](int i) {
          static_cast<void>(cudaSetDevice(0));
          cudaStream_t const s = streams[static_cast<std::size_t>(i)];
          return [f, size, s] { return one_pair(f, size, s); };
        };
        scaling_result const r = thread_scaling(threads, make_pair, st.target(0.04, 0.01));
        cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        if (r.timed.failed || r.cold.failed) {
          static_cast<void>(cudaGetLastError());
          out.note("scaling", st.row(f),
                   "allocation of " + size_label(size) + " failed with " + std::to_string(threads) + " threads");
          continue;
        }
        json_object params;
        params.add("size", size).add("threads", threads);
        out.sample("scaling", st.row(f), params, "pairs_per_s", r.timed.pairs_per_second(threads));
        out.sample("scaling", st.row(f), params, "mean_thread_pairs_per_s", r.timed.mean_thread_rate(threads));
        out.sample("scaling", st.row(f), params, "slowest_over_fastest",
                   r.timed.fastest_thread_s > 0 ? r.timed.slowest_thread_s / r.timed.fastest_thread_s : 0);
        out.sample("scaling", st.row(f), params, "cold_pairs_per_s", r.cold.pairs_per_second(threads));
      }
    }
  }
}

/// Replays through the entry points the log names. Peak reserved: the shim's own
/// count when it is loaded (its cudaMemGetInfo shows pooled memory as free), else
/// cudaMemGetInfo's used bytes above the start.
void replay(settings const& st, sample_writer& out, shim_probe const& shim) {
  for (replay_plan const& plan : st.replays) {
    stream_set created(plan.streams - 1, cudaStreamDefault);
    std::vector<cudaStream_t> streams{nullptr};
    for (std::size_t i = 0; i < created.size(); ++i) streams.push_back(created[i]);
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::uint64_t const used_before = query_device_memory().used();
    gpumem_shim_stats const before = shim.read();
    replay_tally t;
    std::vector<void*> slot(plan.slots, nullptr);
    std::chrono::nanoseconds in_calls{};
    auto note_memory = [&] {
      if (shim.loaded()) {
        t.reserved_known = true;
        t.peak_reserved = std::max<std::uint64_t>(t.peak_reserved, shim.read().reserved_bytes);
      } else {
        t.device_used_known = true;
        std::uint64_t const used = query_device_memory().used();
        if (used > used_before) t.peak_device_used = std::max(t.peak_device_used, used - used_before);
      }
    };
    auto alloc = [&](replay_op const& op) -> void* {
      void* p = nullptr;
      auto const t0 = bench_clock::now();
      cudaError_t const e = op.synchronous ? cudaMalloc(&p, op.bytes)
                                           : cudaMallocAsync(&p, op.bytes, streams[op.stream]);
      in_calls += bench_clock::now() - t0;
      ++t.calls;
      if (e != cudaSuccess) {
        static_cast<void>(cudaGetLastError());
        return nullptr;
      }
      note_memory();
      return p;
    };
    auto release = [&](void* p, bool sync, std::uint32_t stream) {
      auto const t0 = bench_clock::now();
      static_cast<void>(sync ? cudaFree(p) : cudaFreeAsync(p, streams[stream]));
      in_calls += bench_clock::now() - t0;
      ++t.calls;
    };
    for (replay_op const& op : plan.ops) {
      switch (op.what) {
        case replay_op::kind::allocate:
          slot[op.slot] = alloc(op);
          t.failed += slot[op.slot] == nullptr ? 1 : 0;
          break;
        case replay_op::kind::try_allocate:
          if (void* p = alloc(op)) release(p, op.synchronous, op.stream);
          break;
        case replay_op::kind::free:
          if (slot[op.slot] != nullptr) release(slot[op.slot], op.synchronous, op.stream);
          slot[op.slot] = nullptr;
          break;
      }
    }
    for (replay_op const& op : plan.ops) {
      if (op.what == replay_op::kind::allocate && slot[op.slot] != nullptr) {
        release(slot[op.slot], op.synchronous, op.stream);
        slot[op.slot] = nullptr;
      }
    }
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    json_object params;
    params.add("log", plan.name).add("events", static_cast<std::uint64_t>(plan.ops.size()));
    out.sample("replay", st.label, params, "peak_live", static_cast<double>(plan.peak_live));
    if (t.reserved_known) out.sample("replay", st.label, params, "peak_reserved", static_cast<double>(t.peak_reserved));
    if (t.device_used_known) {
      out.sample("replay", st.label, params, "peak_device_used", static_cast<double>(t.peak_device_used));
    }
    out.sample("replay", st.label, params, "failed", static_cast<double>(t.failed));
    // What the shim's pool already held (the first allocation's slab, in a process of
    // its own): counted in peak_reserved, as it would be in the program logged.
    if (shim.loaded()) {
      out.sample("replay", st.label, params, "reserved_at_start", static_cast<double>(before.reserved_bytes));
    }
    out.sample(
        "replay", st.label, params, "ns_per_call",
        t.calls > 0 ? std::chrono::duration<double, std::nano>(in_calls).count() / static_cast<double>(t.calls) : 0);
    if (shim.loaded()) {
      gpumem_shim_stats const s = shim.read();
      out.sample("replay", st.label, params, "device_syncs", static_cast<double>(s.device_syncs - before.device_syncs));
      out.sample("replay", st.label, params, "barriers",
                 static_cast<double>(s.reclaim_barriers - before.reclaim_barriers));
    }
  }
}

}  // namespace

int main(int argc, char** argv) try {
  options const o = parse_args(argc, argv);
  common_options const& c = o.common;
  settings st;
  st.label = o.label;
  st.quick = c.quick;
  st.time_scale = c.time_scale;
  constexpr std::uint64_t KiB = 1024, MiB = KiB << 10U, GiB = MiB << 10U;
  st.latency_sizes = sizes_or(c.latency_sizes, st.quick, {256, MiB, 64 * MiB, GiB},
                              {256, 4 * KiB, 64 * KiB, MiB, 16 * MiB, 64 * MiB, 256 * MiB, GiB});
  st.scaling_sizes = sizes_or(c.scaling_sizes, st.quick, {256, MiB}, {256, MiB, 64 * MiB});
  st.threads = c.threads;
  bool const replay_here = replays_one_log_only(c);
  std::vector<std::string> replay_failures;
  if (replay_here) {
    for (auto const& [name, path] : c.replays()) st.replays.push_back(plan_replay(path, name));
  } else if (c.wants("replay")) {
    replay_failures = replay_each_log_alone(o);
    if (c.only == std::vector<std::string>{"replay"}) {  // nothing else to measure here
      for (auto const& f : replay_failures) std::fprintf(stderr, "gpumem_compare_shim: %s\n", f.c_str());
      return replay_failures.empty() ? 0 : 1;
    }
  }

  device_info const dev = open_device();
  {
    // The shim builds the device's chain at the first allocation; make one so the
    // chain can be described (and its creation is not timed).
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, 256), "cudaMalloc (first allocation)");
    cuda_check(cudaFree(p), "cudaFree (first allocation)");
  }
  shim_probe const shim;
  gpumem_shim_stats const s0 = shim.read();
  if (o.expect_shim && (!shim.loaded() || s0.mode != GPUMEM_SHIM_MODE_ACTIVE)) {
    std::fprintf(
        stderr, "gpumem_compare_shim: --expect-shim, but %s\n",
        shim.loaded() ? "the shim is not active (disabled or misconfigured)" : "libgpumem_shim.so is not loaded");
    return 1;
  }
  if (o.expect_no_shim && shim.loaded()) {
    std::fprintf(stderr, "gpumem_compare_shim: --expect-no-shim, but libgpumem_shim.so is loaded\n");
    return 1;
  }
  sample_writer out{c.out_path};
  out.set_rep(c.rep);
  int const most = *std::max_element(st.threads.begin(), st.threads.end());
  stream_set const streams(static_cast<std::size_t>(std::max(16, most)));
  json_object meta;
  meta.add("program", "gpumem_compare_shim").add("label", st.label).add("rep", c.rep).add("quick", st.quick);
  meta.add("device", dev.name).add("driver_version", dev.driver_version).add("runtime_version", dev.runtime_version);
  meta.add("simulated", dev.simulated).add("shim_loaded", shim.loaded());
  if (shim.loaded()) {
    meta.add("shim_chain", shim.chain()).add("shim_mode", static_cast<int>(s0.mode));
    char const* mode = std::getenv("GPUMEM_SYNC_MODE");
    meta.add("sync_mode", mode != nullptr && *mode != '\0' ? mode : "safe (default)");
  }
  out.meta(meta);

  // Only when named: about a second a process that the report does not use.
  bool const probe = !c.only.empty() && c.wants("host");
  if (probe) host(st, out, "before");
  if (c.wants("latency")) latency(st, out, streams);
  if (c.wants("scaling")) scaling(st, out, streams);
  if (probe && (c.wants("latency") || c.wants("scaling"))) host(st, out, "after");
  if (replay_here) replay(st, out, shim);
  for (auto const& f : replay_failures) {
    std::fprintf(stderr, "gpumem_compare_shim: %s\n", f.c_str());
    out.note("replay", st.label, f);
  }
  return replay_failures.empty() ? 0 : 1;
} catch (std::exception const& e) {
  std::fprintf(stderr, "gpumem_compare_shim: %s\n", e.what());
  return 1;
}
