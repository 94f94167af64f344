#include "device_heap.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace gpumemsim {
namespace {

constexpr std::size_t round_up(std::size_t n, std::size_t a) noexcept { return (n + a - 1) / a * a; }
// Large frees give their pages back to the host so tests can churn big buffers.
constexpr std::size_t discard_threshold = std::size_t{2} << 20;

}  // namespace

device_heap::device_heap(int ordinal, std::size_t bytes) : ordinal_(ordinal) { map(bytes); }

device_heap::~device_heap() { unmap(); }

void device_heap::map(std::size_t bytes) {
  std::string const name = "gpumemsim-device-" + std::to_string(ordinal_);
  owner_pid_ = static_cast<int>(getpid());
  used_ = 0;
  free_by_addr_.clear();
  free_by_size_.clear();
  freed_bases_.clear();
  int err = 0;
  void* p = MAP_FAILED;
  if (bytes > SIZE_MAX - alignment) {
    err = ENOMEM;  // rounding up would wrap around
  } else {
    capacity_ = round_up(bytes, alignment);
    fd_ = memfd_create(name.c_str(), MFD_CLOEXEC);
    if (fd_ >= 0 && ftruncate(fd_, static_cast<off_t>(capacity_)) == 0) {
      p = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
    }
    if (p == MAP_FAILED) err = errno;
  }
  if (p == MAP_FAILED) {
    // A size the host cannot back (say 100 TiB): the device gets no memory, so
    // every allocation fails with CUDA_ERROR_OUT_OF_MEMORY, as on a full GPU,
    // instead of the process dying. Said once, here.
    std::fprintf(stderr, "gpumemsim: cannot map %zu bytes for device %d (%s); the device has no memory\n", bytes,
                 ordinal_, std::strerror(err));
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    capacity_ = 0;
    base_ = 0;
    return;
  }
  base_ = reinterpret_cast<std::uintptr_t>(p);
  insert_free(base_, capacity_);
}

void device_heap::unmap() noexcept {
  if (base_ != 0) munmap(reinterpret_cast<void*>(base_), capacity_);
  if (fd_ >= 0) close(fd_);
  base_ = 0;
  fd_ = -1;
}

void device_heap::erase_free(std::map<std::uintptr_t, std::size_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_addr_.erase(it);
}

void device_heap::insert_free(std::uintptr_t addr, std::size_t size) {
  auto next = free_by_addr_.lower_bound(addr);
  if (next != free_by_addr_.end() && addr + size == next->first) {
    size += next->second;
    erase_free(next++);
  }
  if (next != free_by_addr_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == addr) {
      addr = prev->first;
      size += prev->second;
      erase_free(prev);
    }
  }
  free_by_addr_.emplace(addr, size);
  free_by_size_.emplace(size, addr);
}

void device_heap::discard_pages(std::uintptr_t addr, std::size_t size) noexcept {
  if (size < discard_threshold) return;
  auto const page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  std::uintptr_t const first = (addr + page - 1) / page * page;
  std::uintptr_t const last = (addr + size) / page * page;
  if (last > first) {
    // Best effort: failure only means the pages stay resident.
    (void)fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(first - base_),
                    static_cast<off_t>(last - first));
  }
}

CUresult device_heap::allocate(std::size_t bytes, allocation const& info, std::uintptr_t* out, std::size_t align) {
  if (static_cast<int>(getpid()) != owner_pid_) return CUDA_ERROR_NOT_INITIALIZED;
  if (bytes == 0 || bytes > capacity_) return CUDA_ERROR_OUT_OF_MEMORY;
  std::size_t const size = round_up(bytes, alignment);
  std::lock_guard lock(mutex_);
  // Best fit: the smallest free block that holds `size` bytes at an aligned start.
  auto fit = free_by_size_.lower_bound({size, 0});
  std::uintptr_t addr = 0;
  for (; fit != free_by_size_.end(); ++fit) {
    addr = base_ + round_up(fit->second - base_, align);
    if (addr + size <= fit->second + fit->first) break;
  }
  if (fit == free_by_size_.end()) return CUDA_ERROR_OUT_OF_MEMORY;
  auto const [block_size, block] = *fit;
  free_by_size_.erase(fit);
  free_by_addr_.erase(block);
  if (addr > block) {
    free_by_addr_.emplace(block, addr - block);
    free_by_size_.emplace(addr - block, block);
  }
  if (block + block_size > addr + size) {
    std::size_t const tail = block + block_size - (addr + size);
    free_by_addr_.emplace(addr + size, tail);
    free_by_size_.emplace(tail, addr + size);
  }
  allocation a = info;
  a.base = addr;
  a.size = size;
  a.requested = bytes;
  a.free_pending = false;
  auto const [it, inserted] = live_.emplace(addr, a);
  if (!inserted || (it != live_.begin() && std::prev(it)->first + std::prev(it)->second.size > addr) ||
      (std::next(it) != live_.end() && addr + size > std::next(it)->first)) {
    std::fprintf(stderr, "gpumemsim: internal error: overlapping allocations at %#zx\n",
                 static_cast<std::size_t>(addr));
    std::abort();
  }
  freed_bases_.erase(addr);
  used_ += size;
  *out = addr;
  return CUDA_SUCCESS;
}

std::map<std::uintptr_t, allocation>::iterator device_heap::live_containing(std::uintptr_t ptr) {
  auto it = live_.upper_bound(ptr);
  if (it == live_.begin()) return live_.end();
  --it;
  return ptr < it->first + it->second.size ? it : live_.end();
}

free_status device_heap::check_free(std::uintptr_t ptr, allocation* out) {
  std::lock_guard lock(mutex_);
  if (auto it = live_.find(ptr); it != live_.end()) {
    if (out != nullptr) *out = it->second;
    return it->second.free_pending ? free_status::free_pending : free_status::ok;
  }
  if (live_containing(ptr) != live_.end()) return free_status::interior;
  return freed_bases_.count(ptr) != 0 ? free_status::already_freed : free_status::unknown;
}

free_status device_heap::mark_free_pending(std::uintptr_t ptr) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    if (live_containing(ptr) != live_.end()) return free_status::interior;
    return freed_bases_.count(ptr) != 0 ? free_status::already_freed : free_status::unknown;
  }
  if (it->second.free_pending) return free_status::free_pending;
  it->second.free_pending = true;
  return free_status::ok;
}

void device_heap::clear_free_pending(std::uintptr_t ptr) {
  std::lock_guard lock(mutex_);
  if (auto it = live_.find(ptr); it != live_.end()) it->second.free_pending = false;
}

free_status device_heap::release(std::uintptr_t ptr, bool allow_pending) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    if (live_containing(ptr) != live_.end()) return free_status::interior;
    return freed_bases_.count(ptr) != 0 ? free_status::already_freed : free_status::unknown;
  }
  if (it->second.free_pending && !allow_pending) return free_status::free_pending;
  std::size_t const size = it->second.size;
  live_.erase(it);
  used_ -= size;
  freed_bases_.insert(ptr);
  discard_pages(ptr, size);
  insert_free(ptr, size);
  return free_status::ok;
}

void device_heap::retire(std::uintptr_t ptr) {
  std::lock_guard lock(mutex_);
  live_.erase(ptr);
}

bool device_heap::find(std::uintptr_t ptr, allocation* out) {
  std::lock_guard lock(mutex_);
  auto it = live_containing(ptr);
  if (it == live_.end()) return false;
  if (out != nullptr) *out = it->second;
  return true;
}

std::size_t device_heap::release_all(context const* ctx, std::vector<allocation>* released) {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (auto it = live_.begin(); it != live_.end();) {
    if (it->second.ctx != ctx) {
      ++it;
      continue;
    }
    if (released != nullptr) released->push_back(it->second);
    std::uintptr_t const ptr = it->first;
    std::size_t const size = it->second.size;
    it = live_.erase(it);
    used_ -= size;
    freed_bases_.insert(ptr);
    discard_pages(ptr, size);
    insert_free(ptr, size);
    ++n;
  }
  return n;
}

std::size_t device_heap::used() {
  std::lock_guard lock(mutex_);
  return used_;
}

std::size_t device_heap::live_count() {
  std::lock_guard lock(mutex_);
  return live_.size();
}

bool device_heap::resize(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (!live_.empty() || used_ != 0) return false;
  unmap();
  map(bytes);
  return true;
}

}  // namespace gpumemsim
