#pragma once
// ordering_probe: catches GPU work on a block running after work of the block's
// NEXT owner — the corruption a caching allocator must make impossible.
//
// Each allocation gets a generation (next_generation()). touch(stream, p, n, g)
// queues a host function on `stream` (standing in for a kernel) that, when it runs,
// checks every 256-byte granule of [p, p+n): if work of a newer generation already
// ran there, this older work runs too late — a violation; otherwise it marks the
// granules with g. On the simulated device queued work runs only when something
// synchronizes, so work that nothing orders before the next owner's work really
// does run after it, deterministically.
//
// `launch` is cuLaunchHostFunc or cudaLaunchHostFunc (same ABI), so library tests
// and programs run under the shim use the same probe.
//
// Thread safety: touch() and the queued functions may run on any threads.

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace gpumem::test {

class ordering_probe {
 public:
  using launch_fn = CUresult (*)(CUstream, CUhostFn, void*);

  explicit ordering_probe(launch_fn launch) : launch_{launch} {}
  ordering_probe(ordering_probe const&) = delete;
  ordering_probe& operator=(ordering_probe const&) = delete;

  [[nodiscard]] std::uint64_t next_generation() noexcept { return next_.fetch_add(1, std::memory_order_relaxed); }

  /// Queues work on `s` that uses [p, p + n) as allocation `generation`.
  CUresult touch(CUstream s, void const* p, std::size_t n, std::uint64_t generation) {
    auto* o = new op{this, reinterpret_cast<std::uintptr_t>(p), n, generation};
    CUresult const r = launch_(s, &run, o);
    if (r != CUDA_SUCCESS) delete o;
    return r;
  }

  /// Work that ran after newer work on the same memory.
  [[nodiscard]] long violations() const noexcept { return violations_.load(std::memory_order_relaxed); }
  /// Queued functions that ran.
  [[nodiscard]] long ran() const noexcept { return ran_.load(std::memory_order_relaxed); }

 private:
  struct op {
    ordering_probe* self;
    std::uintptr_t p;
    std::size_t n;
    std::uint64_t generation;
  };
  static void CUDA_CB run(void* user) {
    auto* o = static_cast<op*>(user);
    o->self->apply(*o);
    delete o;
  }
  void apply(op const& o) {
    std::lock_guard lock{mutex_};
    bool late = false;
    for (std::uintptr_t g = o.p / 256; g <= (o.p + o.n - 1) / 256; ++g) {
      auto& newest = newest_[g];
      if (newest > o.generation) late = true;
      if (o.generation > newest) newest = o.generation;
    }
    if (late) violations_.fetch_add(1, std::memory_order_relaxed);
    ran_.fetch_add(1, std::memory_order_relaxed);
  }

  launch_fn launch_;
  std::atomic<std::uint64_t> next_{1};
  std::mutex mutex_;
  std::unordered_map<std::uintptr_t, std::uint64_t> newest_;  ///< granule -> newest generation that ran
  std::atomic<long> violations_{0};
  std::atomic<long> ran_{0};
};

}  // namespace gpumem::test
