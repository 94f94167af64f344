#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/resource_errors.hpp>
#include <gpumem/diagnostics.hpp>
#include <gpumem/error.hpp>
#include <gpumem/vmm_memory_resource.hpp>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace gpumem {
namespace {

using address = std::uintptr_t;

/// One range of virtual addresses reserved on a device, and the parts of it no
/// allocation occupies (start -> size, coalesced).
struct reservation {
  address base{};
  std::size_t size{};
  std::map<address, std::size_t> free;
};

/// What a device needs to place and map memory, resolved at its first allocation.
struct device_state {
  bool resolved = false;
  bool vmm = false;             ///< virtual memory management usable on this device
  std::size_t granularity = 0;  ///< allocation granularity (vmm only)
  std::size_t reservation_size = 0;
  CUmemAllocationProp prop{};
  std::vector<CUmemAccessDesc> access;  ///< the device itself and its peers
  std::vector<reservation> reservations;
  address last_end = 0;  ///< where the previous allocation ended: the next goes there if it can
  /// Pages unmapped during page moves, each kept by a reference of its own (from
  /// cuMemRetainAllocationHandle), mapped again before any page is created.
  std::vector<CUmemGenericAllocationHandle> kept;
};

/// One allocation handed out. Its pages are mapped one physical allocation each,
/// so that any of them can be given back (decommit) and mapped again (commit).
struct chunk {
  std::size_t size{};
  int device{};
  std::size_t reservation{};     ///< index in the device's reservations (vmm only)
  bool fallback = false;         ///< made with cuMemAlloc_v2
  std::vector<bool> released{};  ///< per page: decommitted (vmm only; empty until the first decommit)
  std::size_t released_bytes{};
};

bool has_vmm_entry_points(detail::driver_api const& d) noexcept {
  return d.cuMemGetAllocationGranularity != nullptr && d.cuMemAddressReserve != nullptr &&
         d.cuMemAddressFree != nullptr && d.cuMemCreate != nullptr && d.cuMemRelease != nullptr &&
         d.cuMemMap != nullptr && d.cuMemUnmap != nullptr && d.cuMemSetAccess != nullptr;
}

/// Returns [at, at + size) to a reservation's free map, joined with its neighbours.
void give_back(reservation& r, address at, std::size_t size) {
  auto next = r.free.lower_bound(at);
  if (next != r.free.end() && at + size == next->first) {
    size += next->second;
    next = r.free.erase(next);
  }
  if (next != r.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      prev->second += size;
      return;
    }
  }
  r.free.emplace(at, size);
}

/// Takes [at, at + size) out of the free range starting at or holding `at`.
void take(reservation& r, std::map<address, std::size_t>::iterator range, address at, std::size_t size) {
  address const start = range->first;
  std::size_t const length = range->second;
  r.free.erase(range);
  if (at > start) r.free.emplace(start, at - start);
  if (at + size < start + length) r.free.emplace(at + size, start + length - (at + size));
}

}  // namespace

struct vmm_memory_resource::impl {
  mutable std::mutex mutex;
  mutable std::map<int, device_state> devices;
  std::map<address, chunk> chunks;  ///< by base
  std::size_t held = 0;             ///< mapped or allocated, not yet freed
  int moves = 0;                    ///< begin_page_moves() not yet ended
  std::size_t fallbacks = 0;

  /// The device's state, resolved on first use. Caller holds `mutex`. Never throws
  /// for a driver failure: the device then uses the fallback.
  device_state& state(int device) const {
    device_state& s = devices[device];
    if (s.resolved) return s;
    s.resolved = true;
    auto const& d = detail::driver();
    if (!has_vmm_entry_points(d)) return s;
    CUdevice dev{};
    int supported = 0;
    if (d.cuDeviceGet(&dev, device) != CUDA_SUCCESS ||
        d.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
            CUDA_SUCCESS ||
        supported == 0) {
      return s;
    }
    s.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    s.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    s.prop.location.id = device;
    // Registrable for GPUDirect RDMA (NCCL over InfiniBand) where the device allows
    // it, as cudaMalloc memory is.
    int rdma = 0;
    if (d.cuDeviceGetAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, dev) ==
            CUDA_SUCCESS &&
        rdma != 0) {
      s.prop.allocFlags.gpuDirectRDMACapable = 1;
    }
    // Exportable (CUDA IPC) where the device offers POSIX fds; map_pages drops the
    // request for good if cuMemCreate refuses it.
    int fd_handles = 0;
    if (d.cuDeviceGetAttribute(&fd_handles, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) ==
            CUDA_SUCCESS &&
        fd_handles != 0) {
      s.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    }
    std::size_t total = 0;
    if (d.cuMemGetAllocationGranularity(&s.granularity, &s.prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) !=
            CUDA_SUCCESS ||
        s.granularity == 0 || (s.granularity & (s.granularity - 1)) != 0 ||
        d.cuDeviceTotalMem(&total, dev) != CUDA_SUCCESS || total == 0) {
      s.granularity = 0;
      return s;
    }
    // Twice the device: address space only, and room for the holes freed memory leaves.
    s.reservation_size = align_up(2 * total, s.granularity);
    s.access.push_back(CUmemAccessDesc{{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE});
    int count = 0;
    if (d.cuDeviceGetCount(&count) == CUDA_SUCCESS && d.cuDeviceCanAccessPeer != nullptr) {
      for (int peer = 0; peer < count; ++peer) {
        int can = 0;
        if (peer != device && d.cuDeviceCanAccessPeer(&can, peer, device) == CUDA_SUCCESS && can != 0) {
          s.access.push_back(CUmemAccessDesc{{CU_MEM_LOCATION_TYPE_DEVICE, peer}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE});
        }
      }
    }
    s.vmm = true;
    return s;
  }

  /// Where `size` bytes go on device `s`: after the previous allocation if that
  /// space is free, else the lowest free space that fits, else a new reservation.
  /// Returns the reservation's index and the address. Caller holds `mutex`.
  std::pair<std::size_t, address> place(device_state& s, std::size_t size) {
    for (std::size_t i = 0; i < s.reservations.size(); ++i) {
      auto& r = s.reservations[i];
      auto it = r.free.upper_bound(s.last_end);
      if (it == r.free.begin()) continue;
      --it;
      if (s.last_end >= it->first && s.last_end + size <= it->first + it->second) {
        take(r, it, s.last_end, size);
        return {i, s.last_end};
      }
    }
    for (std::size_t i = 0; i < s.reservations.size(); ++i) {
      auto& r = s.reservations[i];
      for (auto it = r.free.begin(); it != r.free.end(); ++it) {
        if (it->second >= size) {
          address const at = it->first;
          take(r, it, at, size);
          return {i, at};
        }
      }
    }
    std::size_t const length = std::max(s.reservation_size, size);
    CUdeviceptr base{};
    if (CUresult r = detail::driver().cuMemAddressReserve(&base, length, 0, 0, 0); r != CUDA_SUCCESS) {
      detail::throw_allocation_error(r, "cuMemAddressReserve", length);
    }
    s.reservations.push_back(reservation{static_cast<address>(base), length, {}});
    auto& r = s.reservations.back();
    r.free.emplace(r.base, r.size);
    take(r, r.free.begin(), r.base, size);
    return {s.reservations.size() - 1, r.base};
  }

  void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    if (CUresult r = detail::ensure_context(); r != CUDA_SUCCESS)
      detail::throw_allocation_error(r, "cuMemCreate", bytes);
    int const device = detail::current_device();
    if (device < 0) detail::throw_allocation_error(CUDA_ERROR_INVALID_CONTEXT, "cuMemCreate", bytes);
    std::lock_guard lock{mutex};
    device_state& s = state(device);
    if (!s.vmm) return allocate_fallback(bytes, device);
    if (bytes > std::numeric_limits<std::size_t>::max() - s.granularity) {
      detail::throw_allocation_error(CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate", bytes);
    }
    std::size_t const size = align_up(bytes, s.granularity);
    // More than the device has free can only fail, after mapping page by page up to
    // its whole memory and unmapping it again: seconds on an 80 GiB GPU, and every
    // retry of the caller's (a pool's, a framework's) pays them again.
    if (std::size_t free = 0, total = 0;
        detail::driver().cuMemGetInfo(&free, &total) == CUDA_SUCCESS && size > free + s.kept.size() * s.granularity) {
      detail::throw_allocation_error(CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate", size);
    }
    auto const [index, at] = place(s, size);
    if (CUresult r = map_pages(s, at, size); r != CUDA_SUCCESS) {
      give_back(s.reservations[index], at, size);
      detail::throw_allocation_error(r, "cuMemCreate", size);
    }
    try {
      chunks.emplace(at, chunk{size, device, index, false});
    } catch (...) {
      unmap_range(at, size);
      give_back(s.reservations[index], at, size);
      throw;
    }
    s.last_end = at + size;
    held += size;
    return reinterpret_cast<void*>(at);
  }

  /// Maps [at, at + size) with a physical allocation per page (a kept one, else a new
  /// one) and gives the device and its peers access. On failure nothing stays
  /// mapped. Caller holds `mutex`.
  CUresult map_pages(device_state& s, address at, std::size_t size) noexcept {
    auto const& d = detail::driver();
    for (std::size_t done = 0; done < size; done += s.granularity) {
      CUmemGenericAllocationHandle handle{};
      CUresult r = CUDA_SUCCESS;
      if (!s.kept.empty()) {
        handle = s.kept.back();
        s.kept.pop_back();
      } else {
        r = d.cuMemCreate(&handle, s.granularity, &s.prop, 0);
      }
      if ((r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE) &&
          s.prop.requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) {
        // The driver offers shareable handles but will not make them (as some
        // containers and drivers do): unshareable pages, for good.
        s.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
        r = d.cuMemCreate(&handle, s.granularity, &s.prop, 0);
      }
      if (r == CUDA_SUCCESS) {
        address const page_at = at + done;
        r = d.cuMemMap(static_cast<CUdeviceptr>(page_at), s.granularity, 0, handle, 0);
        // The mapping keeps the memory; this reference (the creation's, or the one a
        // kept page held) is no longer needed: unmapping frees the memory.
        static_cast<void>(d.cuMemRelease(handle));
      }
      if (r != CUDA_SUCCESS) {
        if (done != 0) unmap_range(at, done);
        return r;
      }
    }
    CUresult const r = d.cuMemSetAccess(static_cast<CUdeviceptr>(at), size, s.access.data(), s.access.size());
    if (r != CUDA_SUCCESS) unmap_range(at, size);
    return r;
  }

  /// Unmaps a range of whole mappings (one call covers adjacent mappings); the
  /// physical memory goes back to the device with its last mapping.
  static CUresult unmap_range(address at, std::size_t size) noexcept {
    return detail::driver().cuMemUnmap(static_cast<CUdeviceptr>(at), size);
  }

  /// Calls f(start, bytes) for each run of mapped pages of chunk `c` at `base`.
  template <class F>
  static void for_each_mapped_run(address base, chunk const& c, std::size_t page, F&& f) {
    if (c.released.empty()) {
      f(base, c.size);
      return;
    }
    std::size_t const n = c.released.size();
    for (std::size_t i = 0; i < n;) {
      if (c.released[i]) {
        ++i;
        continue;
      }
      std::size_t j = i;
      while (j < n && !c.released[j]) ++j;
      f(base + i * page, (j - i) * page);
      i = j;
    }
  }

  /// One chunk's share of a range that decommit() or commit() was given.
  struct chunk_part {
    chunk* c{};
    address at{};
    std::size_t first{};  ///< index of its first page in the chunk
    std::size_t pages{};
  };

  /// Splits [p, p + bytes) into its parts in consecutive chunks of one device
  /// (a pool's block may span several of its growths), and gives that device's
  /// page size; no parts if the range is not whole pages of such chunks, or if a
  /// page is not in the state `released` says. Caller holds `mutex`.
  std::pair<std::vector<chunk_part>, std::size_t> parts_of(address p, std::size_t bytes, bool released) {
    std::vector<chunk_part> parts;
    auto it = chunks.upper_bound(p);
    if (bytes == 0 || it == chunks.begin()) return {};
    --it;
    auto const st = devices.find(it->second.device);
    if (st == devices.end() || !st->second.vmm) return {};
    std::size_t const page = st->second.granularity;
    if (!is_aligned(p, page) || !is_aligned(bytes, page)) return {};
    address at = p;
    address const end = p + bytes;
    while (at < end) {
      if (it == chunks.end() || it->first > at || it->second.fallback || it->second.device != st->first ||
          at - it->first >= it->second.size) {
        return {};
      }
      chunk& c = it->second;
      std::size_t const first = (at - it->first) / page;
      std::size_t const pages = std::min(end - at, it->first + c.size - at) / page;
      for (std::size_t i = first; i < first + pages; ++i) {
        bool const is_released = !c.released.empty() && c.released[i];
        if (is_released != released) return {};
      }
      parts.push_back({&c, at, first, pages});
      at += pages * page;
      ++it;
    }
    return {std::move(parts), page};
  }

  static void mark(chunk_part const& part, std::size_t page, bool released) {
    for (std::size_t i = part.first; i < part.first + part.pages; ++i) part.c->released[i] = released;
    if (released) {
      part.c->released_bytes += part.pages * page;
    } else {
      part.c->released_bytes -= part.pages * page;
    }
  }

  bool decommit(void* ptr, std::size_t bytes) noexcept {
    auto const p = reinterpret_cast<address>(ptr);
    std::lock_guard lock{mutex};
    try {
      auto const [parts, page] = parts_of(p, bytes, /*released=*/false);
      if (parts.empty()) return false;
      for (auto const& part : parts) {
        if (part.c->released.empty()) part.c->released.assign(part.c->size / page, false);
      }
      device_state& s = devices.at(parts.front().c->device);
      if (moves > 0) s.kept.reserve(s.kept.size() + bytes / page);  // no failure once pages are unmapped
      for (auto const& part : parts) {
        std::size_t const kept_before = s.kept.size();
        if (moves > 0) keep_handles(s, part.at, part.pages, page);
        // A failed unmap leaves those pages mapped, and the earlier parts released.
        if (CUresult const r = unmap_range(part.at, part.pages * page); r != CUDA_SUCCESS) {
          return_kept(s, kept_before);  // still mapped: only the references go
          detail::report_free_failure("cuMemUnmap", r, ptr);
          return false;
        }
        mark(part, page, true);
        held -= part.pages * page;
      }
      return true;
    } catch (...) {
      return false;  // no host memory for the page map: the pages stay mapped
    }
  }

  /// Takes a reference to the physical allocation of each of the `pages` pages at
  /// `at` into s.kept (reserved by the caller), so that it outlives its unmapping. A
  /// page whose reference the driver refuses is not kept: its memory goes back.
  static void keep_handles(device_state& s, address at, std::size_t pages, std::size_t page) noexcept {
    auto const& d = detail::driver();
    if (d.cuMemRetainAllocationHandle == nullptr) return;
    for (std::size_t i = 0; i < pages; ++i) {
      CUmemGenericAllocationHandle h{};
      if (d.cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(at + i * page)) == CUDA_SUCCESS) {
        s.kept.push_back(h);
      }
    }
  }

  /// Drops the references in s.kept from index `from` on: the memory of those no
  /// longer mapped goes back to the device. Caller holds `mutex`.
  static void return_kept(device_state& s, std::size_t from) noexcept {
    for (std::size_t i = from; i < s.kept.size(); ++i) static_cast<void>(detail::driver().cuMemRelease(s.kept[i]));
    s.kept.resize(from);
  }

  void begin_moves() noexcept {
    std::lock_guard lock{mutex};
    ++moves;
  }

  void end_moves() noexcept {
    std::lock_guard lock{mutex};
    if (--moves > 0) return;
    for (auto& [device, s] : devices) return_kept(s, 0);
  }

  void commit(void* ptr, std::size_t bytes) {
    auto const p = reinterpret_cast<address>(ptr);
    std::lock_guard lock{mutex};
    auto const [parts, page] = parts_of(p, bytes, /*released=*/true);
    if (parts.empty()) throw logic_error{"gpumem: vmm commit of a range that is not whole released pages"};
    device_state& s = devices.at(parts.front().c->device);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (CUresult r = map_pages(s, parts[i].at, parts[i].pages * page); r != CUDA_SUCCESS) {
        for (std::size_t j = 0; j < i; ++j) {  // all or nothing
          static_cast<void>(unmap_range(parts[j].at, parts[j].pages * page));
          mark(parts[j], page, true);
          held -= parts[j].pages * page;
        }
        detail::throw_allocation_error(r, "cuMemCreate", bytes);
      }
      mark(parts[i], page, false);
      held += parts[i].pages * page;
    }
  }

  void* allocate_fallback(std::size_t bytes, int device) {
    CUdeviceptr p{};
    if (CUresult r = detail::driver().cuMemAlloc(&p, bytes); r != CUDA_SUCCESS) {
      detail::throw_allocation_error(r, "cuMemAlloc_v2", bytes);
    }
    try {
      chunks.emplace(static_cast<address>(p), chunk{bytes, device, 0, true});
    } catch (...) {
      static_cast<void>(detail::driver().cuMemFree(p));
      throw;
    }
    held += bytes;
    ++fallbacks;
    return reinterpret_cast<void*>(p);
  }

  void deallocate(void* p, stream_ref stream) noexcept {
    if (p == nullptr) return;
    auto const& d = detail::driver();
    bool fallback = false;
    {
      std::lock_guard lock{mutex};
      auto const it = chunks.find(reinterpret_cast<address>(p));
      if (it == chunks.end()) {
        detail::report_free_failure("cuMemUnmap", CUDA_ERROR_INVALID_VALUE, p);
        return;
      }
      fallback = it->second.fallback;
    }
    if (fallback) {
      // cuMemFree waits for the device itself.
      CUresult const r = d.cuMemFree(reinterpret_cast<CUdeviceptr>(p));
      if (r != CUDA_SUCCESS) {
        detail::report_free_failure("cuMemFree_v2", r, p);
        return;
      }
    } else if (CUresult const r = d.cuStreamSynchronize(to_cu(stream)); r != CUDA_SUCCESS) {
      // Unmapping now could pull memory from under queued work: keep it mapped.
      detail::report_free_failure("cuStreamSynchronize before cuMemUnmap", r, p);
      return;
    }
    std::lock_guard lock{mutex};
    auto const it = chunks.find(reinterpret_cast<address>(p));
    if (it == chunks.end()) return;  // freed twice at once by two threads: the other one did it
    chunk const c = it->second;
    if (!c.fallback) {
      auto const st = devices.find(c.device);
      GPUMEM_ASSERT(st != devices.end(), "vmm: a mapping on a device without state");
      device_state& s = st->second;
      CUresult unmapped = CUDA_SUCCESS;
      for_each_mapped_run(it->first, c, s.granularity, [&](address at, std::size_t n) {
        if (unmapped == CUDA_SUCCESS) unmapped = unmap_range(at, n);
      });
      if (unmapped != CUDA_SUCCESS) {
        detail::report_free_failure("cuMemUnmap", unmapped, p);
        return;
      }
      auto& r = s.reservations[c.reservation];
      try {
        give_back(r, it->first, c.size);
        // The last allocation went: the next one goes right after the memory still
        // mapped below it (a pool gave back its end and will grow again there).
        if (s.last_end == it->first + c.size) s.last_end = std::prev(r.free.upper_bound(it->first))->first;
      } catch (...) {
        // No host memory to note the free addresses: they stay unused, nothing else.
      }
    }
    chunks.erase(it);
    held -= c.size - c.released_bytes;
  }

  std::size_t granularity() const noexcept {
    int const device = detail::current_device();
    if (device < 0) return 0;
    try {
      std::lock_guard lock{mutex};
      device_state const& s = state(device);
      return s.vmm ? s.granularity : 0;
    } catch (...) {
      return 0;  // no host memory for the device's state
    }
  }

  bool extends(void const* earlier_end, void const* next) const noexcept {
    auto const at = reinterpret_cast<address>(next);
    if (at != reinterpret_cast<address>(earlier_end)) return false;
    std::lock_guard lock{mutex};
    auto const it = chunks.find(at);
    if (it == chunks.end() || it == chunks.begin() || it->second.fallback) return false;
    auto const prev = std::prev(it);
    return !prev->second.fallback && prev->first + prev->second.size == at &&
           prev->second.device == it->second.device && prev->second.reservation == it->second.reservation;
  }

  void reset_device(int device) noexcept {
    if (!detail::driver_available()) return;
    static_cast<void>(detail::driver().cuCtxSynchronize());  // nothing may still use what is unmapped next
    std::lock_guard lock{mutex};
    drop_device(device, /*free_fallback=*/false);  // cuMemAlloc's memory goes with the context
  }

  ~impl() {
    if (!detail::driver_available()) return;
    // Every chunk's device has a state: state() made it before the chunk.
    while (!devices.empty()) drop_device(devices.begin()->first, /*free_fallback=*/true);
  }

  /// Unmaps every allocation on `device` (and frees the fallback's, if asked), frees
  /// its reservations and forgets its state (resolved again at the next allocation).
  /// Caller holds `mutex`, or is the destructor.
  void drop_device(int device, bool free_fallback) noexcept {
    auto const& d = detail::driver();
    for (auto it = chunks.begin(); it != chunks.end();) {
      if (it->second.device != device) {
        ++it;
        continue;
      }
      auto const at = static_cast<CUdeviceptr>(it->first);
      if (!it->second.fallback) {
        auto const s = devices.find(device);
        std::size_t const page = s != devices.end() ? s->second.granularity : 0;
        for_each_mapped_run(it->first, it->second, page, [](address a, std::size_t n) { unmap_range(a, n); });
      } else if (free_fallback) {
        static_cast<void>(d.cuMemFree(at));
      }
      held -= it->second.size - it->second.released_bytes;
      it = chunks.erase(it);
    }
    auto const s = devices.find(device);
    if (s == devices.end()) return;
    return_kept(s->second, 0);
    for (auto const& r : s->second.reservations) {
      static_cast<void>(d.cuMemAddressFree(static_cast<CUdeviceptr>(r.base), r.size));
    }
    devices.erase(s);
  }
};

vmm_memory_resource::vmm_memory_resource() : impl_{std::make_unique<impl>()} {}
vmm_memory_resource::~vmm_memory_resource() = default;

std::size_t vmm_memory_resource::fallback_allocations() const noexcept {
  std::lock_guard lock{impl_->mutex};
  return impl_->fallbacks;
}

void vmm_memory_resource::reset_device(int device) noexcept { impl_->reset_device(device); }

void* vmm_memory_resource::do_allocate(std::size_t bytes, stream_ref /*stream: synchronous*/) {
  return impl_->allocate(bytes);
}

void vmm_memory_resource::do_deallocate(void* p, std::size_t /*bytes*/, stream_ref stream) noexcept {
  impl_->deallocate(p, stream);
}

resource_info vmm_memory_resource::do_info() const {
  std::lock_guard lock{impl_->mutex};
  return resource_info{.reserved_bytes = impl_->held, .used_bytes = impl_->held};
}

std::size_t vmm_memory_resource::do_contiguous_granularity() const noexcept { return impl_->granularity(); }

bool vmm_memory_resource::do_extends(void const* earlier_end, void const* next) const noexcept {
  return impl_->extends(earlier_end, next);
}

bool vmm_memory_resource::do_decommit(void* p, std::size_t bytes) noexcept { return impl_->decommit(p, bytes); }

void vmm_memory_resource::do_commit(void* p, std::size_t bytes) { impl_->commit(p, bytes); }

void vmm_memory_resource::do_begin_page_moves() noexcept { impl_->begin_moves(); }

void vmm_memory_resource::do_end_page_moves() noexcept { impl_->end_moves(); }

}  // namespace gpumem
