// CUDA IPC over memfd: a handle names (exporter pid, its memfd, device, offset
// of the allocation base, size); another process maps the exporter's memfd
// through /proc/<pid>/fd/<n> (same uid), so both really share the bytes.

#include "memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>

using namespace gpumemsim;

namespace {

constexpr std::uint32_t ipc_magic = 0x67707573;  // "gpus"

struct ipc_wire {
  std::uint32_t magic;
  std::int32_t pid;
  std::int32_t fd;
  std::int32_t device;
  std::uint64_t offset;
  std::uint64_t size;
  std::uint64_t buffer_id;
};
static_assert(sizeof(ipc_wire) <= CU_IPC_HANDLE_SIZE);

struct mapping {
  void* map_base = nullptr;
  std::size_t map_length = 0;
  std::size_t size = 0;
  int device = 0;
  int refs = 0;
  std::tuple<int, int, std::uint64_t> key;
};

struct ipc_registry {
  std::mutex mutex;
  std::map<std::uintptr_t, mapping> by_address;  // key: the pointer handed out
  std::map<std::tuple<int, int, std::uint64_t>, std::uintptr_t> by_handle;
};
ipc_registry& opened() {
  static auto* r = new ipc_registry;
  return *r;
}

}  // namespace

namespace gpumemsim {

bool ipc_lookup(std::uintptr_t ptr, pointer_info* out) {
  auto& r = opened();
  std::lock_guard lock(r.mutex);
  auto it = r.by_address.upper_bound(ptr);
  if (it == r.by_address.begin()) return false;
  --it;
  if (ptr >= it->first + it->second.size) return false;
  out->device = it->second.device;
  out->base = it->first;
  out->size = it->second.size;
  out->ipc_mapped = true;
  out->ctx = &device_at(it->second.device)->ctx;
  return true;
}

}  // namespace gpumemsim

CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  SIM_ENTRY("cuIpcGetMemHandle");
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto const p = static_cast<std::uintptr_t>(dptr);
  device* d = device_of(p);
  allocation a;
  if (d == nullptr || !d->heap->find(p, &a)) return CUDA_ERROR_INVALID_VALUE;
  // Managed and pool memory is not legacy-IPC capable.
  if (a.managed || a.pool != nullptr) return CUDA_ERROR_INVALID_VALUE;
  ipc_wire w{};
  w.magic = ipc_magic;
  w.pid = static_cast<std::int32_t>(getpid());
  w.fd = d->heap->fd();
  w.device = d->ordinal;
  w.offset = a.base - d->heap->base();
  w.size = a.requested;
  w.buffer_id = a.buffer_id;
  std::memset(handle->reserved, 0, sizeof handle->reserved);
  std::memcpy(handle->reserved, &w, sizeof w);
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  SIM_ENTRY("cuIpcOpenMemHandle_v2");
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || (flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  ipc_wire w{};
  std::memcpy(&w, handle.reserved, sizeof w);
  if (w.magic != ipc_magic || w.size == 0 || device_at(w.device) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (w.pid == static_cast<std::int32_t>(getpid())) return CUDA_ERROR_INVALID_CONTEXT;  // as CUDA
  auto const key = std::make_tuple(static_cast<int>(w.pid), static_cast<int>(w.device), w.offset);
  auto& r = opened();
  std::lock_guard lock(r.mutex);
  if (auto it = r.by_handle.find(key); it != r.by_handle.end()) {
    ++r.by_address[it->second].refs;
    *dptr = static_cast<CUdeviceptr>(it->second);
    return CUDA_SUCCESS;
  }
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", w.pid, w.fd);
  int const fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;  // exporter gone or not ours
  auto const page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  std::uint64_t const first = w.offset / page * page;
  std::size_t const length = static_cast<std::size_t>(w.offset - first + w.size);
  void* m = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(first));
  close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  auto const ptr = reinterpret_cast<std::uintptr_t>(m) + static_cast<std::uintptr_t>(w.offset - first);
  mapping mp;
  mp.map_base = m;
  mp.map_length = length;
  mp.size = static_cast<std::size_t>(w.size);
  mp.device = w.device;
  mp.refs = 1;
  mp.key = key;
  r.by_address.emplace(ptr, mp);
  r.by_handle.emplace(key, ptr);
  *dptr = static_cast<CUdeviceptr>(ptr);
  return CUDA_SUCCESS;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  SIM_ENTRY("cuIpcCloseMemHandle");
  context* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  auto& r = opened();
  std::lock_guard lock(r.mutex);
  auto it = r.by_address.find(static_cast<std::uintptr_t>(dptr));
  if (it == r.by_address.end()) return CUDA_ERROR_INVALID_VALUE;
  if (--it->second.refs > 0) return CUDA_SUCCESS;
  munmap(it->second.map_base, it->second.map_length);
  r.by_handle.erase(it->second.key);
  r.by_address.erase(it);
  return CUDA_SUCCESS;
}
