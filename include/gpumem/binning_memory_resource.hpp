#pragma once
// binning_memory_resource: routes each request by size to the smallest bin
// whose size is >= the request; larger requests go to the upstream
// (RMM's binning_memory_resource).
//
// deallocate must be given the same `bytes` as allocate: that is how the free is
// routed to the resource that allocated the block.
//
// Thread safety: allocate/deallocate/release/info/stream_destroyed are
// thread-safe, and the bin lookup takes no lock (binary search over bins fixed
// after construction). add_bin is NOT thread-safe with anything else: call it
// before the resource is shared.
//
// Stream semantics: those of the bin or upstream resource serving the request.
//
// info() assumes every bin draws its memory from this resource's upstream (true
// for owned bins and for the usual arrangement): reserved is the upstream's,
// the bins' cached blocks count as free, their chunks do not count as used.

#include <gpumem/device_memory_resource.hpp>
#include <gpumem/fixed_size_memory_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace gpumem {

class binning_memory_resource final : public device_memory_resource {
 public:
  /// No bins: everything goes upstream until add_bin is called.
  explicit binning_memory_resource(device_memory_resource* upstream);
  /// Owned fixed_size bins of 2^min .. 2^max bytes. Throws logic_error unless
  /// 8 <= min_size_exponent <= max_size_exponent <= 62.
  binning_memory_resource(device_memory_resource* upstream, std::int8_t min_size_exponent,
                          std::int8_t max_size_exponent);
  ~binning_memory_resource() override;

  /// Adds (or replaces) the bin for requests up to `allocation_size` bytes
  /// (rounded up to 256). bin_resource == nullptr: an owned
  /// fixed_size_memory_resource over the upstream that grows in chunks of about
  /// 2 MiB (between 2 and 128 blocks; an existing bin of that size is kept).
  /// Not thread-safe (see above).
  void add_bin(std::size_t allocation_size, device_memory_resource* bin_resource = nullptr);

  [[nodiscard]] device_memory_resource* upstream() const noexcept { return upstream_; }
  /// The resource serving a request of `bytes` (a bin or the upstream).
  [[nodiscard]] device_memory_resource* resource_for(std::size_t bytes) const noexcept;
  /// (bin size, resource) pairs in increasing size.
  [[nodiscard]] std::vector<std::pair<std::size_t, device_memory_resource*>> const& bins() const noexcept {
    return bins_;
  }

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  /// Releases every bin, then the upstream; the sum of what each reported.
  std::size_t do_release() override;
  /// The bins keep their chunks; the upstream trims.
  std::size_t do_trim(std::size_t keep) override;
  [[nodiscard]] resource_info do_info() const override;
  void do_stream_destroyed(stream_ref stream) noexcept override;
  [[nodiscard]] bool do_owns(void const* p) const noexcept override;
  [[nodiscard]] bool do_deallocate_calls_driver() const noexcept override;

  /// Each distinct bin resource once.
  [[nodiscard]] std::vector<device_memory_resource*> distinct_bins() const;

  device_memory_resource* upstream_;
  std::vector<std::pair<std::size_t, device_memory_resource*>> bins_;  // sorted by size
  std::vector<std::unique_ptr<fixed_size_memory_resource>> owned_bins_;
};

}  // namespace gpumem
