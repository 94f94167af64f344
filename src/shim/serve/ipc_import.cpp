// The importing side of gpumem's CUDA IPC (ipc_sharing.hpp): open and close.

#include "serve/ipc_sharing.hpp"
#include "serve/ipc_wire.hpp"
#include "shim_state.hpp"

#include <gpumem/detail/driver_api.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <tuple>
#include <vector>

namespace gpumem::shim {
namespace {

using import_key = std::tuple<int, std::uint64_t, std::uint64_t, std::uint64_t>;  // pid, token, address, generation

struct opened_import {
  import_key key;
  CUdeviceptr base = 0;  ///< the reservation
  std::size_t span = 0;
  std::vector<ipc::page_record> pages;
  int sock = -1;  ///< open while the import is: its end tells the exporter
  int refs = 1;
  CUcontext ctx = nullptr;  ///< current at the open: the mapping's work runs there, and its reset ends it
};

struct importer {
  std::mutex mutex;
  std::map<CUdeviceptr, opened_import> by_pointer;  // the pointer handed out
};
std::atomic<importer*> g_importer{nullptr};  // made at the first open, leaked
std::mutex g_importer_mutex;

importer& state_of_imports() {
  if (importer* x = g_importer.load(std::memory_order_acquire)) return *x;
  std::lock_guard lock{g_importer_mutex};
  importer* x = g_importer.load(std::memory_order_relaxed);
  if (x == nullptr) {
    x = new importer{};
    g_importer.store(x, std::memory_order_release);
  }
  return *x;
}

// Undoes a partial or whole import (pages [0, mapped) mapped).
void unmap_import(opened_import const& o, std::size_t mapped) noexcept {
  auto const& d = detail::driver();
  for (std::size_t i = 0; i < mapped; ++i) (void)d.cuMemUnmap(o.base + o.pages[i].offset, o.pages[i].bytes);
  if (o.base != 0) (void)d.cuMemAddressFree(o.base, o.span);
  if (o.sock >= 0) {
    ::shutdown(o.sock, SHUT_RDWR);  // ends it for the exporter even if a forked child holds a copy
    ::close(o.sock);
  }
}

// Connects to the exporter and receives the pages; maps them. CUDA's error otherwise.
CUresult import_pages(ipc::handle_fields const& f, CUipcMemHandle const& h, int device, opened_import& o,
                      CUdeviceptr& pointer, const char* entry) noexcept {
  auto const& d = detail::driver();
  if (d.cuMemImportFromShareableHandle == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  o.sock = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  auto const len = static_cast<socklen_t>(ipc::socket_address(&addr, f.pid, f.token));
  if (o.sock < 0 || ::connect(o.sock, reinterpret_cast<sockaddr const*>(&addr), len) != 0) {
    message(level::error,
            "%s: the process that exported this gpumem handle (pid %d) is gone, or is not on this machine; "
            "refused (invalid handle)",
            entry, f.pid);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  ipc::reply_header reply{};
  if (!ipc::send_message(o.sock, h.reserved, sizeof h.reserved, nullptr, 0) ||
      !ipc::receive_message(o.sock, &reply, sizeof reply, nullptr, 0))
    return CUDA_ERROR_INVALID_HANDLE;
  if (reply.status != CUDA_SUCCESS) {
    message(level::error, "%s: process %d refused the handle (%s): its memory was freed, or cannot be shared", entry,
            f.pid, reply.status == CUDA_ERROR_NOT_SUPPORTED ? "not supported" : "invalid handle");
    return static_cast<CUresult>(reply.status);
  }
  try {
    o.pages.resize(reply.pages);
  } catch (std::bad_alloc const&) { return CUDA_ERROR_OUT_OF_MEMORY; }
  o.span = reply.span;
  CUresult r = d.cuMemAddressReserve(&o.base, o.span, 0, 0, 0);
  std::size_t mapped = 0;
  // A message's pages at a time, mapped before the next: their descriptors are
  // closed as soon as mapped (a large allocation has thousands).
  for (std::size_t i = 0; r == CUDA_SUCCESS && i < reply.pages; i += ipc::pages_per_message) {
    std::size_t const n = std::min<std::size_t>(ipc::pages_per_message, reply.pages - i);
    int fds[ipc::pages_per_message];
    if (!ipc::receive_message(o.sock, &o.pages[i], n * sizeof(ipc::page_record), fds, n)) {
      r = CUDA_ERROR_INVALID_HANDLE;
      break;
    }
    for (std::size_t k = 0; k < n; ++k) {
      CUmemGenericAllocationHandle ph{};
      if (r == CUDA_SUCCESS)
        r = d.cuMemImportFromShareableHandle(&ph, reinterpret_cast<void*>(static_cast<std::intptr_t>(fds[k])),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      if (r == CUDA_SUCCESS) {
        r = d.cuMemMap(o.base + o.pages[i + k].offset, o.pages[i + k].bytes, 0, ph, 0);
        (void)d.cuMemRelease(ph);  // the mapping holds the memory now
        if (r == CUDA_SUCCESS) ++mapped;
      }
      ::close(fds[k]);
    }
  }
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = d.cuMemSetAccess(o.base, o.span, &access, 1);
  }
  if (r != CUDA_SUCCESS) {
    unmap_import(o, mapped);
    o.sock = -1;
    o.base = 0;
    return r;
  }
  pointer = o.base + reply.offset;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult ipc_open(CUdeviceptr* out, CUipcMemHandle const& h, unsigned flags, const char* entry) noexcept {
  if (!ipc::is_gpumem_handle(h)) return CUDA_ERROR_NOT_SUPPORTED;
  if (out == nullptr || (flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  auto const& d = detail::driver();
  CUcontext ctx = nullptr;
  CUdevice device{};
  if (d.init_result != CUDA_SUCCESS) return d.init_result;
  if (d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr || d.cuCtxGetDevice(&device) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_CONTEXT;
  ipc::handle_fields const f = ipc::fields_of(h);
  if (f.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;  // CUDA's answer in the exporting process
  importer& x = state_of_imports();
  import_key const key{f.pid, f.token, f.address, f.generation};
  {
    std::lock_guard lock{x.mutex};
    for (auto& [pointer, o] : x.by_pointer) {
      if (o.key == key) {  // opened before: the same pointer, counted
        ++o.refs;
        *out = pointer;
        return CUDA_SUCCESS;
      }
    }
  }
  opened_import o;
  o.key = key;
  o.ctx = ctx;
  CUdeviceptr pointer = 0;
  if (CUresult r = import_pages(f, h, static_cast<int>(device), o, pointer, entry); r != CUDA_SUCCESS) {
    if (o.sock >= 0) ::close(o.sock);
    return r;
  }
  try {
    std::lock_guard lock{x.mutex};
    x.by_pointer.emplace(pointer, std::move(o));
  } catch (std::bad_alloc const&) {
    unmap_import(o, o.pages.size());
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = pointer;
  message(level::debug, "%s: %llu bytes of process %d at %#llx", entry, static_cast<unsigned long long>(f.bytes), f.pid,
          static_cast<unsigned long long>(pointer));
  return CUDA_SUCCESS;
}

CUresult ipc_close(CUdeviceptr p, const char* entry) noexcept {
  importer* const x = g_importer.load(std::memory_order_acquire);
  if (x == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  opened_import o;
  {
    std::lock_guard lock{x->mutex};
    auto it = x->by_pointer.find(p);
    if (it == x->by_pointer.end()) return CUDA_ERROR_NOT_SUPPORTED;
    if (--it->second.refs > 0) return CUDA_SUCCESS;
    o = std::move(it->second);
    x->by_pointer.erase(it);
  }
  // Work queued on the mapping (a copy from it, still running) would fault once it
  // is unmapped, and cuMemUnmap does not wait: CUDA's close waits, as a free does,
  // in the context that mapped it (whichever is current now).
  if (detail::scoped_context in{o.ctx}; in.ok() && detail::driver().cuCtxSynchronize() == CUDA_SUCCESS)
    state().stats.device_syncs.add();
  unmap_import(o, o.pages.size());
  message(level::debug, "%s(%#llx): closed", entry, static_cast<unsigned long long>(p));
  return CUDA_SUCCESS;
}

void ipc_forget_imports(int device) noexcept {
  importer* const x = g_importer.load(std::memory_order_acquire);
  if (x == nullptr) return;
  {
    // Nothing open: no need to retain (and maybe create) the primary context below.
    std::lock_guard lock{x->mutex};
    if (x->by_pointer.empty()) return;
  }
  // The reset ends the device's primary context only: imports opened in a context
  // the program created stay.
  auto const& d = detail::driver();
  CUdevice dev{};
  CUcontext primary = nullptr;
  if (d.cuDeviceGet(&dev, device) != CUDA_SUCCESS || d.cuDevicePrimaryCtxRetain(&primary, dev) != CUDA_SUCCESS) return;
  std::vector<opened_import> gone;
  {
    std::lock_guard lock{x->mutex};
    try {
      gone.reserve(x->by_pointer.size());  // the moves below allocate nothing
    } catch (std::bad_alloc const&) {
      (void)d.cuDevicePrimaryCtxRelease(dev);
      return;
    }
    for (auto it = x->by_pointer.begin(); it != x->by_pointer.end();) {
      if (it->second.ctx != primary) {
        ++it;
        continue;
      }
      gone.push_back(std::move(it->second));
      it = x->by_pointer.erase(it);
    }
  }
  if (!gone.empty()) {
    // Mappings outlive contexts: left alone, the pages would stay held and the range
    // reserved for the rest of the process, though the program's pointer died with
    // the reset. Queued work on them would fault once unmapped: waited for first.
    if (detail::scoped_context in{primary}; in.ok() && d.cuCtxSynchronize() == CUDA_SUCCESS)
      state().stats.device_syncs.add();
    for (auto const& o : gone) unmap_import(o, o.pages.size());
    message(level::debug, "device %d: %zu IPC imports closed by the device reset", device, gone.size());
  }
  (void)d.cuDevicePrimaryCtxRelease(dev);
}

void reset_ipc_imports_after_fork() noexcept {
  // The parent's connections: this child's copies would keep the parent's imports
  // open for their exporters after the parent died without closing them. The map is
  // read only if no thread of the parent held its lock at the fork (else it may be
  // half changed; the copies then stay until this child exits).
  if (importer* x = g_importer.load(std::memory_order_relaxed); x != nullptr && x->mutex.try_lock()) {
    for (auto const& [pointer, o] : x->by_pointer) ::close(o.sock);
    x->mutex.unlock();
  }
  g_importer.store(nullptr, std::memory_order_relaxed);  // the parent's mappings and connections
  new (&g_importer_mutex) std::mutex{};
}

}  // namespace gpumem::shim
