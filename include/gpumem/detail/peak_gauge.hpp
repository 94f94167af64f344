#pragma once
// peak_gauge: a quantity that goes up and down (bytes or allocations outstanding)
// and its peak, kept by many threads without a shared write on every change.
//
// Why: a shared atomic that every allocation and free adds to is a cache line that
// moves between all the threads that allocate. With 16 threads it made the
// statistics adaptor slower than the pool below it, and slower than one thread.
//
// How: each thread keeps its net change in its own slot (thread_counters), so the
// exact value is a sum over threads when read. It shares that value in steps: when
// its net change has moved `step` or more from what it last published, it adds the
// difference to one shared total. After an increase the peak is raised to the
// thread's estimate of the whole: the shared total with its own published part
// replaced by its exact part, plus what exited threads left unpublished.
// - One thread: the estimate is exact, and so is the peak.
// - Several: each other thread's part is known to within `step`, so the peak is
//   within (threads - 1) × step of the true one, either way.
// - A thread whose net change stays within one step (allocate, free, allocate...)
//   writes no shared cache line at all.
//
// Mark: a high-water that can be restarted (mark(), reset_mark()) without touching
// the peak, for "the most held since X" (the shim's release at synchronization
// points, cudaMemPoolGetAttribute's resettable highs). It is never above the peak,
// so an add compares its estimate with the mark alone: the hot path keeps its one
// load and compare. After a restart, an add that sets a new high since then writes
// the mark's shared line (as one that set a new peak always did).
//
// Thread safety: add() and estimate() are lock-free (a thread's first call takes
// thread_counters' lock once, to attach its block of slots); current() and peak()
// take that process-wide lock and see every add that returned before them.

#include <gpumem/detail/thread_counters.hpp>

#include <atomic>
#include <cstdint>

namespace gpumem::detail {

class peak_gauge {
 public:
  /// `step` > 0: how far a thread's part may move before it is shared.
  explicit peak_gauge(std::int64_t step) noexcept
      : step_{step}, exited_{slots_.retired(value)}, exited_published_{slots_.retired(published)} {}

  /// Changes the quantity by v (negative to lower it). Inline: the statistics
  /// adaptor makes four of these per allocate+free pair.
  void add(std::int64_t v) noexcept {
    auto* own_published = slots_.own_slot(published);
    if (own_published == nullptr) [[unlikely]] {
      add_shared(v);
      return;
    }
    auto* own = own_published + (value - published);  // the same thread's block
    auto const mine = static_cast<std::int64_t>(own->load(std::memory_order_relaxed)) + v;
    own->store(static_cast<std::uint64_t>(mine), std::memory_order_relaxed);
    auto mine_published = static_cast<std::int64_t>(own_published->load(std::memory_order_relaxed));
    if (mine - mine_published >= step_ || mine_published - mine >= step_) {
      publish(own_published, mine, mine_published);
      mine_published = mine;
    }
    if (v > 0) raise_peak(estimate_with(mine, mine_published));
  }

  /// The exact value: every add that returned before this call.
  [[nodiscard]] std::int64_t current() const noexcept;
  /// The highest value seen: within (threads - 1) × step of the true peak, never
  /// below current(), and never below an earlier peak().
  [[nodiscard]] std::int64_t peak() const noexcept { return read().peak; }
  /// Both, from one sum over the threads.
  struct reading {
    std::int64_t current;
    std::int64_t peak;
  };
  [[nodiscard]] reading read() const noexcept;
  /// The calling thread's estimate of the value, without a lock: exact when only
  /// one thread changes it, otherwise within (threads - 1) × step.
  [[nodiscard]] std::int64_t estimate() const noexcept;

  /// The highest value seen since the last reset_mark() (since construction before
  /// the first): lock-free, one load. Never above peak(); as exact as the peak.
  [[nodiscard]] std::int64_t mark() const noexcept { return mark_.load(std::memory_order_relaxed); }
  /// Restarts mark() from the calling thread's estimate of the value; returns the
  /// mark it replaces. An add racing with it counts in the returned mark or in the
  /// new one. Lock-free; peak() is unchanged.
  std::int64_t reset_mark() noexcept;

 private:
  // `published` below `value`: a thread exiting moves its slots into the retired
  // totals in ascending order, so a reader that sees the new `value` total also
  // sees the new `published` total, and an estimate only ever misses a part.
  enum slot : std::size_t { published, value, slot_count };

  /// The whole, given the calling thread's exact part and its published part.
  [[nodiscard]] std::int64_t estimate_with(std::int64_t mine, std::int64_t mine_published) const noexcept {
    // `value` before `published` (see the slot enum): at worst an exiting thread's
    // part is missed for a moment, never counted twice.
    auto const exited = static_cast<std::int64_t>(exited_->load(std::memory_order_acquire));
    auto const exited_published = static_cast<std::int64_t>(exited_published_->load(std::memory_order_acquire));
    return published_.load(std::memory_order_relaxed) - mine_published + mine + (exited - exited_published);
  }
  /// Raises the mark and the peak to `to` unless the mark is already there (one
  /// load when it is: the mark is never above the peak).
  void raise_peak(std::int64_t to) const noexcept {
    if (to > mark_.load(std::memory_order_relaxed)) [[unlikely]]
      raise_peak_from(to);
  }
  void raise_peak_from(std::int64_t to) const noexcept;
  /// Shares the thread's part: `mine` replaces `mine_published` in the total.
  void publish(std::atomic<std::uint64_t>* own_published, std::int64_t mine, std::int64_t mine_published) noexcept;
  /// add() for a thread without slots of its own.
  void add_shared(std::int64_t v) noexcept;

  std::int64_t const step_;
  // mutable: reading the calling thread's own slot attaches its block on first use.
  mutable thread_counters slots_{slot_count};
  std::atomic<std::uint64_t> const* const exited_;            ///< slots_' retired `value`
  std::atomic<std::uint64_t> const* const exited_published_;  ///< slots_' retired `published`
  alignas(64) std::atomic<std::int64_t> published_{0};        ///< sum of every thread's published part
  // mutable: read() raises them to the exact value it found, so no later read is
  // lower. One line: raised together. mark_ <= peak_ whenever no raise is under way.
  alignas(64) mutable std::atomic<std::int64_t> peak_{0};
  mutable std::atomic<std::int64_t> mark_{0};
};

}  // namespace gpumem::detail
