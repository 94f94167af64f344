// The exporting side of gpumem's CUDA IPC (ipc_sharing.hpp): handles, the socket
// server and the imports it counts, parked frees.

#include "serve/device_chains.hpp"
#include "serve/ipc_sharing.hpp"
#include "serve/ipc_wire.hpp"
#include "shim_state.hpp"

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/os_thread.hpp>
#include <gpumem/stream_tracker.hpp>

#include <poll.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <vector>

namespace gpumem::shim {
namespace {

struct exported {
  std::size_t bytes = 0;  ///< requested
  int device = -1;
  std::uint64_t generation = 0;
  int imports = 0;                 ///< connections that opened it and are still open
  device_chain* parked = nullptr;  ///< set once the program freed it while imported
};

struct exporter {
  std::mutex mutex;
  std::map<std::uintptr_t, exported> by_address;  // live exports, by allocation start
  std::atomic<std::size_t> live{0};               // by_address.size(), read without the lock
  std::atomic<std::size_t> parked_bytes{0};       // the parked records' bytes, read without the lock
  std::uint64_t next_generation = 1;
  std::uint64_t token = 0;
  int listener = -1;    ///< the server's socket; -1 until started
  bool failed = false;  ///< the server could not start: no gpumem handles from now on
};
// Made at the first export and leaked: frees and imports may arrive during exit.
// Every chain free asks ipc_park_free: one load while nothing was exported.
std::atomic<exporter*> g_exporter{nullptr};
std::mutex g_exporter_mutex;

exporter& state_of_exports() {
  if (exporter* x = g_exporter.load(std::memory_order_acquire)) return *x;
  std::lock_guard lock{g_exporter_mutex};
  exporter* x = g_exporter.load(std::memory_order_relaxed);
  if (x == nullptr) {
    x = new exporter{};
    g_exporter.store(x, std::memory_order_release);
  }
  return *x;
}

struct page {
  CUdeviceptr start = 0;
  std::size_t bytes = 0;
};

// The mappings covering [p, p + bytes): the pool's pages, each mapped on its own.
bool pages_of(CUdeviceptr p, std::size_t bytes, std::vector<page>& out) {
  auto const& d = detail::driver();
  CUdeviceptr at = p;
  CUdeviceptr const end = p + std::max<std::size_t>(bytes, 1);
  while (at < end) {
    CUdeviceptr base = 0;
    std::size_t size = 0;
    if (d.cuMemGetAddressRange(&base, &size, at) != CUDA_SUCCESS || size == 0 || base > at) return false;
    out.push_back(page{base, size});
    at = base + size;
  }
  return true;
}

// A descriptor for the physical memory mapped at `start`; -1 when it cannot be
// exported (not mapped memory, or created without a shareable handle type).
int export_page(CUdeviceptr start) noexcept {
  auto const& d = detail::driver();
  if (d.cuMemRetainAllocationHandle == nullptr || d.cuMemExportToShareableHandle == nullptr) return -1;
  CUmemGenericAllocationHandle h{};
  if (d.cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(static_cast<std::uintptr_t>(start))) != CUDA_SUCCESS)
    return -1;
  int fd = -1;
  CUresult const r = d.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  (void)d.cuMemRelease(h);  // the retain's reference; the mapping keeps its own
  return r == CUDA_SUCCESS ? fd : -1;
}

// Whether the physical memory mapped at `at` (any address of the mapping) exports
// as a POSIX fd. Its properties say so without making a descriptor, which costs
// about half a millisecond.
bool exportable(CUdeviceptr at) noexcept {
  auto const& d = detail::driver();
  if (d.cuMemRetainAllocationHandle == nullptr || d.cuMemGetAllocationPropertiesFromHandle == nullptr ||
      d.cuMemExportToShareableHandle == nullptr)
    return false;
  CUmemGenericAllocationHandle h{};
  if (d.cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(static_cast<std::uintptr_t>(at))) != CUDA_SUCCESS)
    return false;
  CUmemAllocationProp prop{};
  bool const ok = d.cuMemGetAllocationPropertiesFromHandle(&prop, h) == CUDA_SUCCESS &&
                  (prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  (void)d.cuMemRelease(h);
  return ok;
}

// One import ended (its connection closed). The generation tells a record of the
// address's next owner (after a device reset dropped this one) from the import's.
void import_closed(exporter& x, std::uintptr_t address, std::uint64_t generation) noexcept {
  std::unique_lock lock{x.mutex};
  auto it = x.by_address.find(address);
  if (it == x.by_address.end() || it->second.generation != generation || --it->second.imports > 0 ||
      it->second.parked == nullptr)
    return;
  exported const e = it->second;
  x.by_address.erase(it);
  x.live.fetch_sub(1, std::memory_order_relaxed);
  x.parked_bytes.fetch_sub(e.bytes, std::memory_order_relaxed);
  lock.unlock();
  free_as_cuda_free(*e.parked, reinterpret_cast<void*>(address), e.bytes, "cuIpcCloseMemHandle");
}

// Answers one import request; true when the import is open (the connection stays).
bool answer(exporter& x, int sock, std::uintptr_t& opened, std::uint64_t& generation) noexcept {
  CUipcMemHandle h{};
  if (!ipc::receive_message(sock, h.reserved, sizeof h.reserved, nullptr, 0)) return false;
  ipc::handle_fields const f = ipc::fields_of(h);
  ipc::reply_header reply{CUDA_ERROR_INVALID_HANDLE, 0, 0, 0};
  auto const refuse = [&] { return ipc::send_message(sock, &reply, sizeof reply, nullptr, 0) && false; };
  if (!ipc::is_gpumem_handle(h) || f.pid != getpid() || f.token != x.token) return refuse();
  {
    std::lock_guard lock{x.mutex};
    auto it = x.by_address.find(f.address);
    // A freed allocation no longer opens, even while earlier imports keep it parked.
    if (it == x.by_address.end() || it->second.generation != f.generation || it->second.parked != nullptr)
      return refuse();
    ++it->second.imports;  // before the driver work: a free meanwhile parks it
  }
  // This thread has no context; the queries need the allocation's device's.
  std::optional<scoped_chain_context> ctx;
  if (device_chain* c = built_chain(f.device)) ctx.emplace(*c);
  std::vector<page> pages;
  bool ok = false;
  try {
    ok = pages_of(f.address, f.bytes, pages) && !pages.empty();
  } catch (std::bad_alloc const&) {}
  if (ok) {
    reply = ipc::reply_header{CUDA_SUCCESS, static_cast<std::uint32_t>(pages.size()),
                              pages.back().start + pages.back().bytes - pages.front().start,
                              f.address - pages.front().start};
    ok = ipc::send_message(sock, &reply, sizeof reply, nullptr, 0);
    // A message's descriptors at a time: a large allocation has thousands of pages,
    // more than a process may hold open.
    for (std::size_t i = 0; ok && i < pages.size(); i += ipc::pages_per_message) {
      std::size_t const n = std::min(ipc::pages_per_message, pages.size() - i);
      ipc::page_record records[ipc::pages_per_message];
      int fds[ipc::pages_per_message];
      std::size_t made = 0;
      for (; made < n; ++made) {
        records[made] = {pages[i + made].start - pages.front().start, pages[i + made].bytes};
        fds[made] = export_page(pages[i + made].start);
        if (fds[made] < 0) break;
      }
      ok = made == n && ipc::send_message(sock, records, n * sizeof(ipc::page_record), fds, n);
      for (std::size_t k = 0; k < made; ++k) ::close(fds[k]);
    }
  } else {
    reply.status = CUDA_ERROR_NOT_SUPPORTED;
    (void)ipc::send_message(sock, &reply, sizeof reply, nullptr, 0);
  }
  if (!ok) {
    import_closed(x, f.address, f.generation);
    return false;
  }
  opened = f.address;
  generation = f.generation;
  return true;
}

// The server: accepts importers and watches their connections end.
void* serve(void* arg) {
  auto& x = *static_cast<exporter*>(arg);
  struct connection {
    int fd;
    std::uintptr_t opened;  // 0 until its import is open
    std::uint64_t generation;
  };
  std::vector<connection> conns;
  std::vector<pollfd> polled;
  for (;;) {
    polled.assign(1, pollfd{x.listener, POLLIN, 0});
    for (auto const& c : conns) polled.push_back(pollfd{c.fd, POLLIN, 0});
    if (::poll(polled.data(), polled.size(), -1) < 0) continue;  // EINTR cannot come (signals blocked)
    for (std::size_t i = conns.size(); i-- > 0;) {
      if (polled[i + 1].revents == 0) continue;
      connection& c = conns[i];
      bool keep = false;
      if (c.opened == 0) {
        keep = answer(x, c.fd, c.opened, c.generation);
      } else {
        char byte = 0;
        keep = ::recv(c.fd, &byte, 1, MSG_DONTWAIT) > 0;  // nothing is sent after the request: only the end
        if (!keep) import_closed(x, c.opened, c.generation);
      }
      if (!keep) {
        ::close(c.fd);
        conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    if ((polled[0].revents & POLLIN) != 0) {
      int const fd = ::accept4(x.listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        try {
          conns.push_back(connection{fd, 0, 0});
        } catch (std::bad_alloc const&) { ::close(fd); }
      }
    }
  }
  return nullptr;
}

// Starts the server once; false when it cannot run (no gpumem handles then).
bool server_running(exporter& x) noexcept {
  if (x.listener >= 0) return true;
  if (x.failed) return false;
  x.failed = true;
  if (::getrandom(&x.token, sizeof x.token, 0) != static_cast<ssize_t>(sizeof x.token)) return false;
  int const s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  sockaddr_un addr{};
  auto const len = static_cast<socklen_t>(ipc::socket_address(&addr, getpid(), x.token));
  pthread_t thread{};
  x.listener = s;
  if (::bind(s, reinterpret_cast<sockaddr const*>(&addr), len) != 0 || ::listen(s, 64) != 0 ||
      !detail::start_quiet_thread(thread, "gpumem-ipc", &serve, &x)) {
    ::close(s);
    x.listener = -1;
    return false;
  }
  pthread_detach(thread);
  x.failed = false;
  return true;
}

}  // namespace

CUresult ipc_export(void* p, CUipcMemHandle* out, const char* entry) noexcept {
  auto const hit = registry().find_containing(reinterpret_cast<std::uintptr_t>(p));
  if (!hit || !from_chain(hit->second.kind) || out == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  std::uintptr_t const address = hit->first;
  allocation const& a = hit->second;
  ipc::handle_fields f{};
  std::memcpy(f.magic, ipc::handle_magic, sizeof f.magic);
  f.pid = getpid();
  f.device = a.device;
  f.address = address;
  f.bytes = a.bytes;
  // Exported before (PyTorch asks at every send of a tensor): the same handle, at
  // once. The record lives until the allocation is freed.
  if (exporter* x = g_exporter.load(std::memory_order_acquire); x != nullptr) {
    std::lock_guard lock{x->mutex};
    if (auto it = x->by_address.find(address); it != x->by_address.end() && it->second.parked == nullptr) {
      f.generation = it->second.generation;
      f.token = x->token;
      std::memcpy(out->reserved, &f, sizeof f);
      return CUDA_SUCCESS;
    }
  }
  // The allocation's context for the driver calls below: the calling thread may have
  // none current yet (a multiprocessing queue's feeder thread pickling a tensor),
  // which cudaIpcGetMemHandle would have made current before asking the driver.
  std::optional<scoped_chain_context> in;
  if (a.chain != nullptr) in.emplace(*a.chain);
  // Exportable pages? The pool makes all of its pages alike, so its first says. (A
  // pool over cuMemAlloc slabs has none: ipc_policy decides.)
  if (!exportable(address)) return CUDA_ERROR_NOT_SUPPORTED;
  exporter& x = state_of_exports();
  bool first_in_process = false;
  {
    std::lock_guard lock{x.mutex};
    if (!server_running(x)) {
      message(level::error, "%s(%p): cannot serve IPC handles (no Unix socket or thread); refused", entry, p);
      return CUDA_ERROR_OPERATING_SYSTEM;
    }
    try {
      auto [it, fresh] = x.by_address.try_emplace(address);
      if (fresh) {
        it->second = exported{a.bytes, a.device, x.next_generation++, 0, nullptr};
        x.live.fetch_add(1, std::memory_order_relaxed);
      }
      f.generation = it->second.generation;
      first_in_process = f.generation == 1;
    } catch (std::bad_alloc const&) { return CUDA_ERROR_OUT_OF_MEMORY; }
    f.token = x.token;
  }
  std::memcpy(out->reserved, &f, sizeof f);
  // The block may have been reused behind a GPU-side barrier while its previous
  // owner's work still ran; another process's work is ordered by nothing of ours,
  // so let that work finish first (once per allocation; never during a capture).
  if (!stream_tracker::capture_active() && detail::driver().cuCtxSynchronize() == CUDA_SUCCESS)
    state().stats.device_syncs.add();
  if (first_in_process) {
    message(level::info,
            "%s: handles of pooled memory are gpumem's own; they open only in processes that run gpumem too "
            "(elsewhere CUDA answers invalid argument: run that process under gpumem-run, or this one with "
            "--resource cuda)",
            entry);
  }
  message(level::debug, "%s(%p): gpumem handle for %zu bytes at %#zx", entry, p, a.bytes,
          static_cast<std::size_t>(address));
  return CUDA_SUCCESS;
}

bool ipc_park_free(void* p, allocation const& a) noexcept {
  // Every chain free asks: two loads while nothing exported is live. (An export
  // happens-before the free of its allocation: the program orders them.)
  exporter* const x = g_exporter.load(std::memory_order_acquire);
  if (x == nullptr || x->live.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock{x->mutex};
  auto it = x->by_address.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == x->by_address.end()) return false;
  if (it->second.imports == 0) {
    x->by_address.erase(it);
    x->live.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  if (it->second.parked == nullptr) x->parked_bytes.fetch_add(it->second.bytes, std::memory_order_relaxed);
  it->second.parked = a.chain;
  return true;
}

void ipc_forget_device(int device) noexcept {
  ipc_forget_imports(device);
  exporter* const x = g_exporter.load(std::memory_order_acquire);
  if (x == nullptr) return;
  std::lock_guard lock{x->mutex};
  for (auto it = x->by_address.begin(); it != x->by_address.end();) {
    if (it->second.device != device) {
      ++it;
      continue;
    }
    // A parked block is not given back: the reset released its chain's memory
    // (the importers' mappings hold the pages). Its imports' ends find no record.
    if (it->second.parked != nullptr) x->parked_bytes.fetch_sub(it->second.bytes, std::memory_order_relaxed);
    it = x->by_address.erase(it);
    x->live.fetch_sub(1, std::memory_order_relaxed);
  }
}

std::size_t ipc_parked_bytes() noexcept {
  exporter const* const x = g_exporter.load(std::memory_order_acquire);
  return x != nullptr ? x->parked_bytes.load(std::memory_order_relaxed) : 0;
}

void reset_ipc_after_fork() noexcept {
  // The server thread is the parent's; its socket and connections stay the parent's.
  exporter* const x = g_exporter.load(std::memory_order_relaxed);
  if (x != nullptr && x->listener >= 0) ::close(x->listener);
  g_exporter.store(nullptr, std::memory_order_relaxed);
  new (&g_exporter_mutex) std::mutex{};
  reset_ipc_imports_after_fork();
}

}  // namespace gpumem::shim
