#pragma once
// thread_counters: event counters that the hot paths bump without a shared write.
//
// A shared atomic counter costs an atomic read-modify-write per event (about 10 ns
// on an H100 host, and the cache line moves between every thread that counts). A
// counter that only has to be exact when it is read can live in pieces instead:
// each thread adds to its own slot with a plain load and store, and a read sums
// the slots of every thread, plus what exited threads left behind.
//
// Layout: every thread that counts gets one block of `slots_per_thread` 64-bit
// slots on its first add (one host allocation per thread, reused by later threads
// once it exits); a thread_counters object owns `n` consecutive slot numbers, the
// same in every block. When a thread exits, its block's values move into the
// retired totals and the block waits for the next thread. Adds made after that
// (a thread-exit destructor freeing device memory), or when no block or slot
// could be had, go to the retired totals directly, as atomic adds.
//
// Thread safety: add() is lock-free and wait-free for the calling thread; get()
// takes a process-wide mutex (so a thread's values are never counted twice as it
// exits) and sees every add that happened before it. Values are unsigned and wrap.

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpumem::detail {

/// The calling thread's block of counter slots (thread_counters); null until its
/// first add, and again once the thread is exiting.
inline thread_local std::atomic<std::uint64_t>* tl_counter_slots = nullptr;

class thread_counters {
 public:
  /// Slots in each thread's block, shared by every thread_counters in the process.
  /// A statistics adaptor takes 7 and the shim 10 plus two adaptors per device: room
  /// for every device of a large node and the adaptors a configuration adds, at 4 KiB
  /// per thread.
  static constexpr std::size_t slots_per_thread = 512;

  /// Owns `n` counters (slot numbers); 0 if the process has no free run of `n` slots
  /// left, in which case every add is an atomic add on a shared total.
  explicit thread_counters(std::size_t n) noexcept;
  ~thread_counters();
  thread_counters(thread_counters const&) = delete;
  thread_counters& operator=(thread_counters const&) = delete;

  /// Adds v to counter i (< n).
  void add(std::size_t i, std::uint64_t v = 1) noexcept {
    if (first_ != no_slots) {
      if (auto* s = thread_slots()) {
        auto& slot = s[first_ + i];
        slot.store(slot.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
        return;
      }
    }
    add_shared(i, v);
  }

  /// Counter i: every thread's adds so far.
  [[nodiscard]] std::uint64_t get(std::size_t i) const noexcept;

  /// The calling thread's own slot for counter i, or nullptr when its adds go to the
  /// shared totals (no slots left in the process, no block, or the thread exiting).
  /// Only the calling thread may write it; it keeps its value until the thread exits.
  [[nodiscard]] std::atomic<std::uint64_t>* own_slot(std::size_t i) noexcept {
    if (first_ == no_slots) return nullptr;
    auto* s = thread_slots();
    return s != nullptr ? s + first_ + i : nullptr;
  }

  /// Counter i's shared part: what exited threads left in it and the adds made
  /// without a slot. Read it with one acquire load, no lock; the address is fixed for
  /// the object's life. Exiting threads move their values in ascending counter order,
  /// each with release ordering.
  [[nodiscard]] std::atomic<std::uint64_t> const* retired(std::size_t i) const noexcept;

  /// Sets every counter to 0 (a forked child starting clean: it has one thread).
  void reset() noexcept;

  /// In a forked child: the process-wide lock is made anew (another parent thread
  /// may have held it at fork()); every block but the calling thread's is retired.
  static void reset_after_fork() noexcept;

 private:
  static constexpr std::size_t no_slots = ~std::size_t{0};

  /// The calling thread's block (attached on first use); nullptr while the thread
  /// exits or if no block could be had.
  static std::atomic<std::uint64_t>* thread_slots() noexcept {
    if (auto* s = tl_counter_slots) return s;
    return attach();
  }
  static std::atomic<std::uint64_t>* attach() noexcept;
  void add_shared(std::size_t i, std::uint64_t v) noexcept;

  std::size_t const n_;
  std::size_t first_ = no_slots;
  std::atomic<std::uint64_t>* shared_ = nullptr;  ///< n retired totals when first_ == no_slots
};

}  // namespace gpumem::detail
