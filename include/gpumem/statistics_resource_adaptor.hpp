#pragma once
// statistics_resource_adaptor: counts what passes through it (bytes and
// allocations: current, peak, total; deallocations; failed allocations).
//
// Bytes are the *requested* sizes (as RMM counts them). allocate(0) and
// deallocate(nullptr) are forwarded but not counted (they move no memory).
// Thread safety: lock-free on every allocation and free, with no shared write
// while a thread's outstanding bytes and allocations each stay within a step
// (4 MiB, 64 allocations) of what it last shared: see detail::peak_gauge. The
// totals and the deallocation count are kept per thread (detail::thread_counters).
// Reading takes a process-wide lock and sums over threads:
// - `current` and `total` are exact as of the calls that returned before the read
//   (bytes() and allocations() are not one snapshot);
// - `peak` is exact when one thread allocates; with several it is within
//   (threads - 1) × the step of the true peak, either way, and never below
//   `current`. With sharing::every_change every call shares (one atomic addition a
//   counter) and the peak is exact: for an adaptor below a pool, which sees only
//   its growth.
// Streams: passed through unchanged.

#include <gpumem/detail/peak_gauge.hpp>
#include <gpumem/detail/thread_counters.hpp>
#include <gpumem/forwarding_resource_adaptor.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace gpumem {

class statistics_resource_adaptor final : public forwarding_resource_adaptor {
 public:
  /// Like RMM's statistics_resource_adaptor::counter.
  struct counters {
    std::int64_t current{};  ///< now outstanding
    std::int64_t peak{};     ///< highest `current` ever seen
    std::int64_t total{};    ///< sum of all allocations ever made
  };

  /// How a thread shares its outstanding bytes and allocations with the others.
  enum class sharing {
    in_steps,      ///< once they moved 4 MiB or 64 allocations: scales across threads
    every_change,  ///< at every call: exact estimates and peaks, one shared write a
                   ///< call (for an adaptor that sees few calls, below a pool)
  };

  /// `upstream` must outlive the adaptor. Throws logic_error on null.
  explicit statistics_resource_adaptor(device_memory_resource* upstream, sharing s = sharing::in_steps);

  [[nodiscard]] counters bytes() const noexcept { return read(bytes_, total_bytes); }
  /// bytes().current as the calling thread sees it without a lock (cheap enough for
  /// every log row): exact when one thread allocates or with sharing::every_change,
  /// otherwise within (threads - 1) × 4 MiB.
  [[nodiscard]] std::int64_t current_bytes_estimate() const noexcept { return bytes_.estimate(); }
  /// The highest bytes().current since the last reset_bytes_mark() (since
  /// construction before the first): lock-free, one load, as exact as the peak.
  /// bytes().peak is never lowered: the report's peaks stay whole.
  [[nodiscard]] std::int64_t bytes_mark() const noexcept { return bytes_.mark(); }
  /// Restarts bytes_mark() from the calling thread's estimate of bytes().current;
  /// returns the mark it replaces. Lock-free.
  std::int64_t reset_bytes_mark() noexcept { return bytes_.reset_mark(); }
  [[nodiscard]] counters allocations() const noexcept { return read(allocations_, total_allocations); }
  [[nodiscard]] std::int64_t deallocations() const noexcept {
    return static_cast<std::int64_t>(totals_.get(total_deallocations));
  }
  /// Allocations the upstream refused (out_of_memory or any other exception).
  [[nodiscard]] std::int64_t failed_allocations() const noexcept { return failures_.load(std::memory_order_relaxed); }

 private:
  /// totals_' counters.
  enum total : std::size_t { total_bytes, total_allocations, total_deallocations, total_count };

  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  /// Pages given back or mapped again inside an allocation count in bytes() (so,
  /// below a pool, bytes() is the device memory it holds), not in allocations().
  /// The released ranges are remembered (decommits are rare: a pool's slow path),
  /// so that an allocation freed with some of its pages released subtracts only
  /// what it still held.
  bool do_decommit(void* p, std::size_t bytes) noexcept override;
  void do_commit(void* p, std::size_t bytes) override;
  /// Forgets the released ranges inside [p, p + bytes); returns their bytes.
  std::size_t take_released(char* p, std::size_t bytes) noexcept;
  [[nodiscard]] counters read(detail::peak_gauge const& g, total t) const noexcept {
    auto const [current, peak] = g.read();
    return {current, peak, static_cast<std::int64_t>(totals_.get(t))};
  }

  // A thread shares its part once it moved this far (detail::peak_gauge): in steps,
  // 4 MiB keeps a loop of 1 MiB allocations off the shared line, 64 allocations a
  // loop of small ones that keeps a few dozen alive.
  detail::peak_gauge bytes_;
  detail::peak_gauge allocations_;
  alignas(64) std::atomic<std::int64_t> failures_{0};
  std::atomic<bool> any_released_{false};  ///< read on every free: released_ is locked only when set
  std::mutex released_mutex_;
  std::map<char*, std::size_t> released_;  ///< decommitted ranges (start -> bytes), disjoint
  detail::thread_counters totals_{total_count};
};

}  // namespace gpumem
