#pragma once
// pool_memory_resource: a coalescing best-fit sub-allocator over slabs obtained
// from an upstream resource, with one free list per stream (RMM's pool, reworked).
//
// Stream semantics (RMM's stream-ordered contract, device_memory_resource.hpp):
// - A block freed on stream A goes to A's free list and is reused by A at once:
//   no event, no host wait.
// - Stream B takes memory freed on A only after B is ordered after A: at the
//   moment B takes it the pool records A's (one, reusable) event and makes B wait
//   on it (cuStreamWaitEvent). No event is recorded per free, and the host never
//   blocks. B then owns A's whole free list (the wait covers all of it).
// - stream_destroyed(s) records one event on s and moves s's free blocks to a
//   "foreign" list guarded by that event; a stream taking from it waits on it
//   (until cuEventQuery says it completed). s is never named again.
// - A capturing stream (cuStreamIsCapturing) never gets an event recorded on it
//   and is never made to wait: the pool grows instead.
// - The per-thread default stream (0x2) is a different stream on every thread,
//   so its free list is per thread. Only its thread can name it: other threads
//   order after it with an event on the legacy stream, which waits for every
//   blocking stream (per-thread default streams included).
//
// Thread safety: every member is thread-safe. Threads working on different
// streams contend on no common lock in allocate/deallocate (one mutex per stream's
// free list; the stream table and the slab table are read under shared locks).
// Growth takes a separate growth mutex. release() and info() lock everything.
//
// Growth: on a miss that no other stream's free memory can serve, the pool takes
// a slab of max(request, min_growth, what this stream has grown so far capped at
// the pool size) — geometric per stream — within maximum_size. If the upstream
// is out of memory it tries max(request, min_growth), then takes every other
// stream's free memory, returns fully free slabs upstream and retries the
// request alone; only then it throws out_of_memory saying what it holds.
//
// Complexity: allocate/deallocate O(log n) in the number of free blocks of the
// stream (best fit from a size-ordered set, coalescing through an address map).
//
// deallocate(p, bytes, s) needs the `bytes` given to allocate (rounded up to 256
// as allocate did); an unknown pointer or a block that overlaps a free one
// (double free on the same stream) is ignored rather than corrupting the pool.

#include <gpumem/device_memory_resource.hpp>

#include <cstddef>
#include <memory>
#include <optional>

namespace gpumem {

inline constexpr std::size_t pool_default_min_growth = std::size_t{2} << 20;  // 2 MiB

struct pool_options {
  /// Bytes reserved at construction (rounded up to 256). nullopt: half of the
  /// current device's free memory (cuMemGetInfo), capped by maximum_size. 0: none.
  std::optional<std::size_t> initial_size{};
  /// Most bytes the pool ever holds from the upstream. nullopt: no cap (the upstream decides).
  std::optional<std::size_t> maximum_size{};
  /// Smallest upstream request when the pool grows.
  std::size_t min_growth = pool_default_min_growth;
};

class pool_memory_resource final : public device_memory_resource {
 public:
  /// Throws logic_error for a null upstream or initial_size > maximum_size,
  /// out_of_memory if the initial reservation fails, cuda_error if the initial
  /// size must be read from a driver that fails.
  explicit pool_memory_resource(device_memory_resource* upstream, pool_options opts = {});
  /// Returns every slab to the upstream, whether or not blocks are still in use
  /// (as RMM does), and destroys the pool's events.
  ~pool_memory_resource() override;

  [[nodiscard]] device_memory_resource* upstream() const noexcept;
  /// Bytes currently reserved from the upstream (sum of slab sizes).
  [[nodiscard]] std::size_t pool_size() const noexcept;
  [[nodiscard]] pool_options const& options() const noexcept;

 private:
  struct impl;
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  /// Returns every completely free slab to the upstream; the bytes returned.
  std::size_t do_release() override;
  [[nodiscard]] resource_info do_info() const override;
  void do_stream_destroyed(stream_ref stream) noexcept override;

  std::unique_ptr<impl> impl_;
};

}  // namespace gpumem
