#pragma once
// fixed_size_memory_resource: hands out blocks of one size from chunks obtained
// from an upstream resource, in O(1) (RMM's fixed_size_memory_resource).
//
// Every request of 1..block_size bytes gets one block; larger requests throw
// gpumem::bad_alloc(CUDA_ERROR_INVALID_VALUE). The resource grows by one chunk
// of `blocks_to_preallocate` blocks (the first is taken at construction); if the
// upstream cannot give a whole chunk it retries with a single block.
//
// Stream semantics are the pool's (pool_memory_resource.hpp): a free stack per
// stream, reuse on the same stream without events, and a stream taking blocks
// freed on another stream waits on that stream's event, recorded lazily at the
// moment of the take. Unlike the pool, a stream takes only another's spare blocks
// (all but the one it freed last, which it will most likely reuse) and grows
// before it takes a stream's last free block, which it does only when the upstream
// refuses. Capturing streams are never recorded on or made to wait.
//
// Thread safety: every member is thread-safe; threads on different streams share
// no lock in allocate/deallocate. Each block's in-use flag catches double frees,
// which are ignored; a foreign or interior pointer, or a size over the block size,
// aborts in debug builds (GPUMEM_ASSERT) and is ignored in release builds.
// Neighbouring blocks' flags lie on different cache lines, so threads reusing their
// own blocks do not slow each other down.

#include <gpumem/device_memory_resource.hpp>

#include <cstddef>
#include <memory>

namespace gpumem {

class fixed_size_memory_resource final : public device_memory_resource {
 public:
  static constexpr std::size_t default_block_size = std::size_t{1} << 20;  // 1 MiB
  static constexpr std::size_t default_blocks_to_preallocate = 128;

  /// block_size is rounded up to 256. Throws logic_error for a null upstream, a
  /// zero block size or zero blocks_to_preallocate; out_of_memory if the first
  /// chunk cannot be allocated.
  explicit fixed_size_memory_resource(device_memory_resource* upstream, std::size_t block_size = default_block_size,
                                      std::size_t blocks_to_preallocate = default_blocks_to_preallocate);
  /// Returns every chunk to the upstream, in use or not.
  ~fixed_size_memory_resource() override;

  [[nodiscard]] device_memory_resource* upstream() const noexcept;
  [[nodiscard]] std::size_t block_size() const noexcept;
  [[nodiscard]] std::size_t blocks_per_chunk() const noexcept;

 private:
  struct impl;
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  /// Returns every chunk whose blocks are all free; the bytes returned.
  std::size_t do_release() override;
  [[nodiscard]] resource_info do_info() const override;
  void do_stream_destroyed(stream_ref stream) noexcept override;
  /// p inside one of the resource's chunks (or a caching upstream's memory).
  [[nodiscard]] bool do_owns(void const* p) const noexcept override;
  /// A free only files the block in a list: no driver call.
  [[nodiscard]] bool do_deallocate_calls_driver() const noexcept override { return false; }

  std::unique_ptr<impl> impl_;
};

}  // namespace gpumem
