#pragma once
// statistics_resource_adaptor: counts what passes through it (bytes and
// allocations: current, peak, total; deallocations; failed allocations).
//
// Bytes are the *requested* sizes (as RMM counts them). allocate(0) and
// deallocate(nullptr) are forwarded but not counted (they move no memory).
// Thread safety: lock-free. An allocation costs two relaxed atomic additions (bytes
// and allocations now outstanding, from which the peaks follow; a CAS only while a
// peak is actually rising) and a free two subtractions; the totals and the
// deallocation count are kept per thread (detail::thread_counters) and summed when
// read. A reader gets each counter exactly as of the calls that returned before
// it, but bytes() and allocations() are not one snapshot.
// Streams: passed through unchanged.

#include <gpumem/detail/thread_counters.hpp>
#include <gpumem/forwarding_resource_adaptor.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpumem {

class statistics_resource_adaptor final : public forwarding_resource_adaptor {
 public:
  /// Like RMM's statistics_resource_adaptor::counter.
  struct counters {
    std::int64_t current{};  ///< now outstanding
    std::int64_t peak{};     ///< highest `current` ever seen
    std::int64_t total{};    ///< sum of all allocations ever made
  };

  /// `upstream` must outlive the adaptor. Throws logic_error on null.
  explicit statistics_resource_adaptor(device_memory_resource* upstream);

  [[nodiscard]] counters bytes() const noexcept { return bytes_.read(totals_.get(total_bytes)); }
  /// bytes().current alone: no sum over threads (cheap enough for every log row).
  [[nodiscard]] std::int64_t current_bytes() const noexcept { return bytes_.current.load(std::memory_order_relaxed); }
  [[nodiscard]] counters allocations() const noexcept { return allocations_.read(totals_.get(total_allocations)); }
  [[nodiscard]] std::int64_t deallocations() const noexcept {
    return static_cast<std::int64_t>(totals_.get(total_deallocations));
  }
  /// Allocations the upstream refused (out_of_memory or any other exception).
  [[nodiscard]] std::int64_t failed_allocations() const noexcept { return failures_.load(std::memory_order_relaxed); }

 private:
  /// What is outstanding and its peak; the total lives in totals_.
  struct atomic_counter {
    std::atomic<std::int64_t> current{0};
    std::atomic<std::int64_t> peak{0};
    void add(std::int64_t v) noexcept;
    void sub(std::int64_t v) noexcept { current.fetch_sub(v, std::memory_order_relaxed); }
    [[nodiscard]] counters read(std::uint64_t total) const noexcept {
      return {current.load(std::memory_order_relaxed), peak.load(std::memory_order_relaxed),
              static_cast<std::int64_t>(total)};
    }
  };
  /// totals_' counters.
  enum total : std::size_t { total_bytes, total_allocations, total_deallocations, total_count };

  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;

  // Bytes and counts on separate cache lines: they are written by every call.
  alignas(64) atomic_counter bytes_;
  alignas(64) atomic_counter allocations_;
  alignas(64) std::atomic<std::int64_t> failures_{0};
  detail::thread_counters totals_{total_count};
};

}  // namespace gpumem
