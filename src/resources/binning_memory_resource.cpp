#include <gpumem/binning_memory_resource.hpp>

#include <algorithm>
#include <string>

namespace gpumem {
namespace {
constexpr std::size_t owned_bin_chunk_bytes = std::size_t{2} << 20;
}  // namespace

binning_memory_resource::binning_memory_resource(device_memory_resource* upstream) : upstream_{upstream} {
  if (upstream_ == nullptr) throw logic_error{"gpumem: binning_memory_resource needs an upstream resource"};
}

binning_memory_resource::binning_memory_resource(device_memory_resource* upstream, std::int8_t min_size_exponent,
                                                 std::int8_t max_size_exponent)
    : binning_memory_resource{upstream} {
  if (min_size_exponent < 8 || max_size_exponent < min_size_exponent || max_size_exponent > 62) {
    throw logic_error{"gpumem: binning_memory_resource needs 8 <= min_size_exponent <= max_size_exponent <= 62 (got " +
                      std::to_string(min_size_exponent) + ", " + std::to_string(max_size_exponent) + ")"};
  }
  for (int e = min_size_exponent; e <= max_size_exponent; ++e) add_bin(std::size_t{1} << e);
}

binning_memory_resource::~binning_memory_resource() = default;

void binning_memory_resource::add_bin(std::size_t allocation_size, device_memory_resource* bin_resource) {
  if (allocation_size == 0 || allocation_size > (std::size_t{1} << 62)) {
    throw logic_error{"gpumem: binning_memory_resource bin size must be in 1 .. 2^62 (got " +
                      std::to_string(allocation_size) + ")"};
  }
  std::size_t const size = align_up(allocation_size, allocation_alignment);
  auto it = std::lower_bound(bins_.begin(), bins_.end(), size,
                             [](auto const& b, std::size_t s) { return b.first < s; });
  bool const exists = it != bins_.end() && it->first == size;
  if (bin_resource == nullptr) {
    if (exists) return;  // as RMM: an existing bin of that size is kept
    // Chunks of about 2 MiB (128 blocks at most, 2 at least): RMM's flat 128 blocks
    // would make a 256 B..1 MiB binning chain reserve 255 MiB before its first call.
    std::size_t const blocks = std::clamp<std::size_t>(owned_bin_chunk_bytes / size, 2, 128);
    owned_bins_.push_back(std::make_unique<fixed_size_memory_resource>(upstream_, size, blocks));
    bin_resource = owned_bins_.back().get();
  }
  if (exists) {
    it->second = bin_resource;
  } else {
    bins_.insert(it, {size, bin_resource});
  }
}

device_memory_resource* binning_memory_resource::resource_for(std::size_t bytes) const noexcept {
  auto it = std::lower_bound(bins_.begin(), bins_.end(), bytes,
                             [](auto const& b, std::size_t s) { return b.first < s; });
  return it == bins_.end() ? upstream_ : it->second;
}

void* binning_memory_resource::do_allocate(std::size_t bytes, stream_ref stream) {
  if (bytes == 0) return nullptr;
  return resource_for(bytes)->allocate(bytes, stream);
}

void binning_memory_resource::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (p == nullptr) return;
  resource_for(bytes)->deallocate(p, bytes, stream);
}

bool binning_memory_resource::do_deallocate_calls_driver() const noexcept {
  // A free goes to the bin of its size, or to the upstream above the largest bin.
  return upstream_->deallocate_calls_driver() ||
         std::any_of(bins_.begin(), bins_.end(), [](auto const& bin) { return bin.second->deallocate_calls_driver(); });
}

std::vector<device_memory_resource*> binning_memory_resource::distinct_bins() const {
  std::vector<device_memory_resource*> out;
  out.reserve(bins_.size());
  for (auto const& [size, r] : bins_) {
    if (r != upstream_ && std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  }
  return out;
}

std::size_t binning_memory_resource::do_release() {
  std::size_t released = 0;
  for (auto* bin : distinct_bins()) released += bin->release();
  return released + upstream_->release();
}

std::size_t binning_memory_resource::do_trim(std::size_t keep) { return upstream_->trim(keep); }

resource_info binning_memory_resource::do_info() const {
  resource_info const up = upstream_->info();
  std::size_t bin_reserved = 0;
  std::size_t bin_used = 0;
  std::size_t largest = up.largest_free_block;
  std::size_t pending = up.pending_bytes;
  std::size_t peak_pending = up.peak_pending_bytes;  // the parts' peaks: an upper bound
  for (auto* bin : distinct_bins()) {
    auto const b = bin->info();
    bin_reserved += b.reserved_bytes;
    bin_used += b.used_bytes;
    largest = std::max(largest, b.largest_free_block);
    pending += b.pending_bytes;
    peak_pending += b.peak_pending_bytes;
  }
  resource_info r{};
  r.reserved_bytes = up.reserved_bytes;
  // The bins' chunks are "used" in the upstream; only what the bins hand out is used here.
  r.used_bytes = std::min(up.used_bytes - std::min(up.used_bytes, bin_reserved) + bin_used, r.reserved_bytes);
  r.free_bytes = r.reserved_bytes - r.used_bytes;
  r.largest_free_block = largest;
  r.pending_bytes = pending;
  r.peak_pending_bytes = peak_pending;
  r.released_bytes = up.released_bytes;
  r.pages_released_total = up.pages_released_total;
  r.pages_recommitted_total = up.pages_recommitted_total;
  r.page_work_ns = up.page_work_ns;
  return r;
}

bool binning_memory_resource::do_owns(void const* p) const noexcept {
  for (auto const& [size, bin] : bins_) {
    if (bin != upstream_ && bin->owns(p)) return true;
  }
  return upstream_->owns(p);
}

void binning_memory_resource::do_stream_destroyed(stream_ref stream) noexcept {
  for (auto const& [size, bin] : bins_) bin->stream_destroyed(stream);  // each is idempotent
  upstream_->stream_destroyed(stream);
}

}  // namespace gpumem
