#include "vmm.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gpumemsim {
namespace {

constexpr int reserved_flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

constexpr std::size_t round_up(std::size_t n, std::size_t a) noexcept { return (n + a - 1) / a * a; }

void* to_ptr(std::uintptr_t p) noexcept { return reinterpret_cast<void*>(p); }

std::size_t as_size(std::uintptr_t p) noexcept { return static_cast<std::size_t>(p); }

constexpr std::uint64_t share_magic = 0x31666476'73757067;  // "gpusvdf1"

/// What an exported fd's file position points at (see vmm.hpp).
struct share_record {
  std::uint64_t magic = 0;
  std::int32_t device = 0;
  std::int32_t unused = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  CUmemAllocationProp prop{};
};

std::atomic<int> g_posix_fd_handles{static_cast<int>(vmm_state::fd_handles::supported)};

}  // namespace

vmm_state::fd_handles vmm_state::posix_fd_handles() noexcept {
  return static_cast<fd_handles>(g_posix_fd_handles.load(std::memory_order_relaxed));
}

void vmm_state::set_posix_fd_handles(fd_handles mode) noexcept {
  g_posix_fd_handles.store(static_cast<int>(mode), std::memory_order_relaxed);
}

vmm_state& vmm_state::get() {
  static auto* s = new vmm_state;  // immortal, like the rest of the sim's state
  return *s;
}

bool vmm_state::supported() noexcept {
  static bool const value = [] {
    char const* s = std::getenv("GPUMEM_SIM_NO_VMM");
    return s == nullptr || std::strcmp(s, "1") != 0;
  }();
  return value;
}

std::map<std::uintptr_t, std::size_t>::iterator vmm_state::reservation_of(std::uintptr_t ptr) {
  auto it = reservations_.upper_bound(ptr);
  if (it == reservations_.begin()) return reservations_.end();
  --it;
  return ptr - it->first < it->second ? it : reservations_.end();
}

std::map<std::uintptr_t, vmm_state::mapping>::iterator vmm_state::mapping_of(std::uintptr_t ptr) {
  auto it = mappings_.upper_bound(ptr);
  if (it == mappings_.begin()) return mappings_.end();
  --it;
  return ptr - it->first < it->second.size ? it : mappings_.end();
}

int vmm_state::host_protection(granule_access a) noexcept {
  if (a.write != 0) return PROT_READ | PROT_WRITE;
  return a.read != 0 ? PROT_READ : PROT_NONE;
}

std::pair<int, std::uint64_t> vmm_state::backing(physical const& ph) {
  if (ph.imported_fd >= 0) return {ph.imported_fd, ph.offset};
  device_heap const& heap = *device_at(ph.device)->heap;
  return {heap.fd(), ph.block - heap.base()};
}

void vmm_state::drop_if_unused(std::map<CUmemGenericAllocationHandle, physical>::iterator it) {
  physical const& ph = it->second;
  if (ph.refs > 0 || ph.mappings > 0) return;
  if (ph.imported_fd >= 0) {
    close(ph.imported_fd);
  } else if (ph.exported) {
    device_at(ph.device)->heap->retire(ph.block);  // another process may map it still
  } else {
    device_at(ph.device)->heap->release(ph.block, false);
  }
  handles_.erase(it);
}

CUresult vmm_state::reserve(std::size_t size, std::size_t align, std::uintptr_t hint, std::uintptr_t* out) {
  if (align < granularity) align = granularity;
  void* p = MAP_FAILED;
  if (hint != 0 && hint % align == 0) {
    // A hint is taken only where nothing is mapped yet.
    p = mmap(to_ptr(hint), size, PROT_NONE, reserved_flags | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != MAP_FAILED && p != to_ptr(hint)) {  // a kernel without MAP_FIXED_NOREPLACE
      munmap(p, size);
      p = MAP_FAILED;
    }
  }
  if (p == MAP_FAILED) {
    // Over-reserve, then trim both ends to the alignment.
    if (size > SIZE_MAX - align) return CUDA_ERROR_OUT_OF_MEMORY;
    std::size_t const span = size + align;
    void* raw = mmap(nullptr, span, PROT_NONE, reserved_flags, -1, 0);
    if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    auto const first = reinterpret_cast<std::uintptr_t>(raw);
    std::uintptr_t const start = round_up(first, align);
    if (start > first) munmap(raw, start - first);
    if (first + span > start + size) munmap(to_ptr(start + size), first + span - (start + size));
    p = to_ptr(start);
  }
  auto const base = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(mutex_);
  reservations_.emplace(base, size);
  reservation_count_.fetch_add(1, std::memory_order_relaxed);
  *out = base;
  return CUDA_SUCCESS;
}

CUresult vmm_state::free_reservation(std::uintptr_t ptr, std::size_t size) {
  std::lock_guard lock(mutex_);
  auto it = reservations_.find(ptr);
  if (it == reservations_.end() || it->second != size) {
    violation("cuMemAddressFree(%#zx, %zu): not a reservation of that size", as_size(ptr), size);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (auto m = mappings_.lower_bound(ptr); m != mappings_.end() && m->first - ptr < size) {
    violation("cuMemAddressFree(%#zx, %zu): memory is still mapped at %#zx", as_size(ptr), size, as_size(m->first));
    return CUDA_ERROR_INVALID_VALUE;
  }
  munmap(to_ptr(ptr), size);
  reservations_.erase(it);
  reservation_count_.fetch_sub(1, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

CUresult vmm_state::create(int device, std::size_t size, CUmemAllocationProp const& prop,
                           CUmemGenericAllocationHandle* out) {
  allocation info;  // no context: cuCtxDestroy and primary context resets leave it alone
  info.buffer_id = next_buffer_id();
  std::uintptr_t block = 0;
  auto const page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (CUresult r = device_at(device)->heap->allocate(size, info, &block, page); r != CUDA_SUCCESS) return r;
  physical ph;
  ph.device = device;
  ph.block = block;
  ph.size = size;
  ph.prop = prop;
  std::lock_guard lock(mutex_);
  CUmemGenericAllocationHandle const h = next_handle_++;
  handles_.emplace(h, ph);
  *out = h;
  return CUDA_SUCCESS;
}

CUresult vmm_state::release(CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(mutex_);
  auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.refs == 0) {
    if (handle != 0 && handle < next_handle_) {
      violation("cuMemRelease(%#llx): handle already released", handle);
    } else {
      violation("cuMemRelease(%#llx): unknown handle", handle);
    }
    return CUDA_ERROR_INVALID_VALUE;
  }
  --it->second.refs;
  drop_if_unused(it);
  return CUDA_SUCCESS;
}

CUresult vmm_state::map(std::uintptr_t ptr, std::size_t size, CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(mutex_);
  auto h = handles_.find(handle);
  if (h == handles_.end() || h->second.refs == 0) {
    violation("cuMemMap(%#zx, %zu): unknown or released handle %#llx", as_size(ptr), size, handle);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (size > h->second.size) return CUDA_ERROR_INVALID_VALUE;
  auto r = reservation_of(ptr);
  if (r == reservations_.end() || size > r->second - (ptr - r->first)) {
    violation("cuMemMap(%#zx, %zu): not inside one reservation", as_size(ptr), size);
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto next = mappings_.lower_bound(ptr);
  if ((next != mappings_.end() && next->first - ptr < size) || mapping_of(ptr) != mappings_.end()) {
    violation("cuMemMap(%#zx, %zu): the range is already mapped", as_size(ptr), size);
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto const [file, offset] = backing(h->second);
  // No access until cuMemSetAccess, as documented.
  void* p = mmap(to_ptr(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, file, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  mapping m;
  m.size = size;
  m.handle = handle;
  m.buffer_id = next_buffer_id();
  m.access.resize(size / granularity);
  mappings_.emplace(ptr, std::move(m));
  ++h->second.mappings;
  return CUDA_SUCCESS;
}

CUresult vmm_state::unmap(std::uintptr_t ptr, std::size_t size) {
  std::lock_guard lock(mutex_);
  // Documented: the range must consist of whole mappings; a sub-range is refused.
  std::uintptr_t cur = ptr;
  while (cur - ptr < size) {
    auto m = mappings_.find(cur);
    if (m == mappings_.end() || m->second.size > size - (cur - ptr)) {
      violation("cuMemUnmap(%#zx, %zu): not a range of whole mappings", as_size(ptr), size);
      return CUDA_ERROR_INVALID_VALUE;
    }
    cur += m->second.size;
  }
  for (cur = ptr; cur - ptr < size;) {
    auto m = mappings_.find(cur);
    std::size_t const length = m->second.size;
    // Back to a reservation: private, inaccessible, no memory behind it.
    if (mmap(to_ptr(cur), length, PROT_NONE, reserved_flags | MAP_FIXED, -1, 0) == MAP_FAILED) {
      std::fprintf(stderr, "gpumemsim: internal error: cannot unmap %#zx\n", as_size(cur));
      std::abort();
    }
    auto h = handles_.find(m->second.handle);
    mappings_.erase(m);
    --h->second.mappings;
    drop_if_unused(h);
    cur += length;
  }
  return CUDA_SUCCESS;
}

CUresult vmm_state::set_access(std::uintptr_t ptr, std::size_t size, CUmemAccessDesc const* desc, std::size_t count) {
  std::lock_guard lock(mutex_);
  for (std::uintptr_t cur = ptr; cur - ptr < size; cur += granularity) {
    if (mapping_of(cur) == mappings_.end()) return CUDA_ERROR_INVALID_VALUE;  // documented: fully mapped
  }
  for (std::uintptr_t cur = ptr; cur - ptr < size; cur += granularity) {
    auto m = mapping_of(cur);
    granule_access& a = m->second.access[(cur - m->first) / granularity];
    for (std::size_t i = 0; i < count; ++i) {
      std::uint64_t const bit = std::uint64_t{1} << static_cast<unsigned>(desc[i].location.id);
      a.read &= ~bit;
      a.write &= ~bit;
      if ((desc[i].flags & CU_MEM_ACCESS_FLAGS_PROT_READ) != 0) a.read |= bit;
      if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) a.write |= bit;
    }
    if (mprotect(to_ptr(cur), granularity, host_protection(a)) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

CUresult vmm_state::get_access(std::uintptr_t ptr, int device, unsigned long long* flags) {
  std::lock_guard lock(mutex_);
  auto m = mapping_of(ptr);
  if (m == mappings_.end()) return CUDA_ERROR_INVALID_VALUE;
  granule_access const a = m->second.access[(ptr - m->first) / granularity];
  std::uint64_t const bit = std::uint64_t{1} << static_cast<unsigned>(device);
  if ((a.write & bit) != 0) {
    *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  } else {
    *flags = (a.read & bit) != 0 ? CU_MEM_ACCESS_FLAGS_PROT_READ : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  }
  return CUDA_SUCCESS;
}

CUresult vmm_state::properties(CUmemGenericAllocationHandle handle, CUmemAllocationProp* out) {
  std::lock_guard lock(mutex_);
  auto h = handles_.find(handle);
  if (h == handles_.end() || h->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
  *out = h->second.prop;
  return CUDA_SUCCESS;
}

CUresult vmm_state::retain(std::uintptr_t ptr, CUmemGenericAllocationHandle* out) {
  std::lock_guard lock(mutex_);
  auto m = mapping_of(ptr);
  if (m == mappings_.end()) return CUDA_ERROR_INVALID_VALUE;
  ++handles_.find(m->second.handle)->second.refs;
  *out = m->second.handle;
  return CUDA_SUCCESS;
}

CUresult vmm_state::export_fd(CUmemGenericAllocationHandle handle, int* out) {
  std::lock_guard lock(mutex_);
  auto h = handles_.find(handle);
  if (h == handles_.end() || h->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
  physical& ph = h->second;
  // Guessed: CUDA documents no specific error for a handle created without the request.
  if ((ph.prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) return CUDA_ERROR_INVALID_VALUE;
  auto const [file, offset] = backing(ph);
  // A fresh open file description: its position is this export's own.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", file);
  int const fd = open(path, O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  share_record rec;
  rec.magic = share_magic;
  rec.device = ph.device;
  rec.offset = offset;
  rec.size = ph.size;
  rec.prop = ph.prop;
  // O_APPEND: exports in several processes sharing the memfd never overwrite each
  // other. Then the position goes back to the record, and O_APPEND is dropped.
  off_t end = -1;
  if (write(fd, &rec, sizeof rec) == static_cast<ssize_t>(sizeof rec)) end = lseek(fd, 0, SEEK_CUR);
  if (end < static_cast<off_t>(sizeof rec) || lseek(fd, end - static_cast<off_t>(sizeof rec), SEEK_SET) < 0 ||
      fcntl(fd, F_SETFL, 0) != 0) {
    close(fd);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  ph.exported = true;
  *out = fd;
  return CUDA_SUCCESS;
}

CUresult vmm_state::import_fd(int fd, CUmemGenericAllocationHandle* out) {
  off_t const at = lseek(fd, 0, SEEK_CUR);
  share_record rec;
  if (at < 0 || pread(fd, &rec, sizeof rec, at) != static_cast<ssize_t>(sizeof rec) || rec.magic != share_magic)
    return CUDA_ERROR_INVALID_VALUE;
  auto const end = static_cast<std::uint64_t>(at);
  if (rec.size == 0 || rec.size % granularity != 0 || rec.offset > end || rec.size > end - rec.offset)
    return CUDA_ERROR_INVALID_VALUE;
  // Documented: memory this process cannot support.
  if (device_at(rec.device) == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  int const own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  physical ph;
  ph.device = rec.device;
  ph.size = static_cast<std::size_t>(rec.size);
  ph.prop = rec.prop;
  ph.prop.win32HandleMetaData = nullptr;  // an address of the exporter's
  ph.imported_fd = own;
  ph.offset = rec.offset;
  std::lock_guard lock(mutex_);
  CUmemGenericAllocationHandle const h = next_handle_++;
  handles_.emplace(h, ph);
  *out = h;
  return CUDA_SUCCESS;
}

bool vmm_state::lookup(std::uintptr_t ptr, pointer_info* out) {
  if (reservation_count_.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lock(mutex_);
  auto m = mapping_of(ptr);
  if (m == mappings_.end()) return false;
  auto r = reservation_of(ptr);
  out->device = handles_.find(m->second.handle)->second.device;
  out->base = m->first;
  out->size = m->second.size;
  out->vmm = true;
  out->range_base = r->first;
  out->range_size = r->second;
  out->ctx = nullptr;
  out->buffer_id = m->second.buffer_id;
  return true;
}

bool vmm_state::reserved(std::uintptr_t ptr) {
  if (reservation_count_.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lock(mutex_);
  return reservation_of(ptr) != reservations_.end();
}

vmm_state::range_status vmm_state::check_range(std::uintptr_t ptr, std::size_t bytes, access_kind how) {
  if (reservation_count_.load(std::memory_order_relaxed) == 0) return range_status::outside;
  std::lock_guard lock(mutex_);
  if (reservation_of(ptr) == reservations_.end()) return range_status::outside;
  if (bytes > UINTPTR_MAX - ptr) return range_status::inaccessible;
  // Adjacent mappings (of different handles) form one range, as on a GPU.
  for (std::uintptr_t cur = ptr; cur < ptr + bytes;) {
    auto m = mapping_of(cur);
    if (m == mappings_.end()) return range_status::inaccessible;
    std::size_t const index = (cur - m->first) / granularity;
    granule_access const a = m->second.access[index];
    if ((how == access_kind::write ? a.write : a.read) == 0) return range_status::inaccessible;
    cur = m->first + (index + 1) * granularity;
  }
  return range_status::ok;
}

}  // namespace gpumemsim
