#pragma once
// tracking_resource_adaptor: remembers every outstanding allocation (pointer,
// size, stream, thread, time, entry point, device, optionally the call stack) so
// leaks can be listed at any moment.
//
// Storage: 64 shards keyed by pointer, each a hash map with its own mutex, so
// threads allocating different pointers almost never wait on each other (no
// global lock; O(1) per call). Reports lock one shard at a time.
// A deallocate of a pointer the adaptor does not know (allocated before it was
// installed, or freed twice) is counted, reported once per pointer at debug level
// (diagnostics.hpp), and still forwarded: the upstream decides what it means.
// Thread safety: fully thread-safe. Streams: passed through unchanged.

#include <gpumem/forwarding_resource_adaptor.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace gpumem {

struct allocation_record {
  void* ptr{};
  std::size_t bytes{};
  std::uintptr_t stream{};    ///< handle as given (0 null, 0x1 legacy, 0x2 per-thread)
  std::uint64_t thread_id{};  ///< OS thread id (gettid)
  std::int64_t time_ns{};     ///< CLOCK_REALTIME at allocation
  /// call_context entry point at allocation ("cudaMalloc", ...), or "allocate" for
  /// library calls. The shim's entry names are string literals, so the pointer
  /// stays valid for the life of the process.
  const char* entry_point{};
  int device{-1};            ///< call_context device (-1: unknown)
  std::vector<void*> stack;  ///< return addresses, when capture_stacks
};

class tracking_resource_adaptor final : public forwarding_resource_adaptor {
 public:
  static constexpr std::size_t shard_count = 64;
  static constexpr int max_stack_depth = 32;

  /// `upstream` must outlive the adaptor. `capture_stacks`: record backtrace() at
  /// each allocation (costly: microseconds per call; for leak hunting only).
  explicit tracking_resource_adaptor(device_memory_resource* upstream, bool capture_stacks = false);

  [[nodiscard]] std::size_t outstanding_count() const;
  [[nodiscard]] std::size_t outstanding_bytes() const;
  /// Every outstanding allocation, oldest first (ties broken by address).
  [[nodiscard]] std::vector<allocation_record> outstanding() const;
  /// Human-readable summary: a total line, then up to `max_rows` oldest
  /// allocations, one per line (with symbolized stacks when captured).
  [[nodiscard]] std::string leak_report(std::size_t max_rows = 20) const;
  /// Deallocations of pointers this adaptor did not know.
  [[nodiscard]] std::size_t unknown_deallocations() const noexcept {
    return unknown_frees_.load(std::memory_order_relaxed);
  }

 private:
  struct alignas(64) shard {
    mutable std::mutex mutex;
    std::unordered_map<void*, allocation_record> live;
    std::unordered_set<void*> reported_unknown;  ///< for the once-per-pointer message
    std::size_t bytes{};
  };

  [[nodiscard]] shard& shard_for(void const* p) const noexcept;

  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;

  bool capture_stacks_;
  mutable std::array<shard, shard_count> shards_;
  std::atomic<std::size_t> unknown_frees_{0};
};

}  // namespace gpumem
