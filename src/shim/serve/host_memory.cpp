#include "serve/host_memory.hpp"

#include "observe/event_log.hpp"
#include "serve/device_chains.hpp"
#include "serve/process_chains.hpp"
#include "shim_state.hpp"

#include <mutex>
#include <new>
#include <unordered_map>

namespace gpumem::shim {
namespace {

// The pinned pointers the host chain handed out, with their requested sizes: a
// pinned free names no size, and the device registry is for device frees' paths.
std::mutex g_live_mutex;
std::unordered_map<void const*, std::size_t>* g_live = nullptr;  // never destroyed: frees may come during exit

std::unordered_map<void const*, std::size_t>& live() {
  if (g_live == nullptr) g_live = new std::unordered_map<void const*, std::size_t>{};
  return *g_live;
}

// The requested size of the live pinned pointer `p`, which stops being live; 0 when
// `p` is not one (no allocation is of 0 bytes).
std::size_t take_live(void const* p) noexcept {
  std::lock_guard lock{g_live_mutex};
  if (g_live == nullptr) return 0;
  auto const it = g_live->find(p);
  if (it == g_live->end()) return 0;
  std::size_t const bytes = it->second;
  g_live->erase(it);
  return bytes;
}

void log_host(log_action action, void const* p, std::size_t bytes, int device, const char* entry, CUresult r,
              event_start start) noexcept {
  log_process_event(process_memory::pinned, action, p, bytes, nullptr, device, entry, r, start);
}

}  // namespace

CUresult host_allocate(void** out, std::size_t bytes, unsigned flags, const char* entry) noexcept {
  CUcontext ctx = nullptr;
  int const device = current_device(ctx);
  if (device < 0) return CUDA_ERROR_NOT_SUPPORTED;
  auto const start = event_clock();
  void* p = nullptr;
  CUresult r = process_allocate(process_memory::pinned, &p, bytes, flags, device, entry);
  if (r == CUDA_ERROR_NOT_SUPPORTED) return r;
  if (r == CUDA_SUCCESS) {
    try {
      std::lock_guard lock{g_live_mutex};
      live().emplace(p, bytes);
    } catch (std::exception const&) {
      process_deallocate(process_memory::pinned, p, bytes, entry);
      r = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (r == CUDA_SUCCESS) {
    *out = p;
    message(level::trace, "%s: %zu bytes, flags %#x, from the host chain: %p", entry, bytes, flags, p);
    log_host(log_action::allocate, p, bytes, device, entry, r, start);
  } else {
    log_host(log_action::allocate_failure, nullptr, bytes, device, entry, r, start);
  }
  return r;
}

host_free_result host_free(void* p, const char* entry) noexcept {
  auto const start = event_clock();
  std::size_t const bytes = take_live(p);
  if (bytes == 0) {
    // A pointer into memory the pools hold that is not a live allocation: a second
    // free or an interior pointer. CUDA refuses those; handing it to CUDA could
    // free a cached block under the pool.
    if (!process_chain_owns(process_memory::pinned, p)) return host_free_result::not_ours;
    log_host(log_action::free, p, 0, -1, entry, CUDA_ERROR_INVALID_VALUE, start);
    return host_free_result::refused;
  }
  process_deallocate(process_memory::pinned, p, bytes, entry);
  message(level::trace, "%s: %p (%zu bytes) back to the host chain", entry, p, bytes);
  log_host(log_action::free, p, bytes, -1, entry, CUDA_SUCCESS, start);
  return host_free_result::freed;
}

void note_host_passthrough(bool allocation, void* p, std::size_t bytes, const char* entry, CUresult r) noexcept {
  count_process_passthrough(process_memory::pinned);
  log_action const a = !allocation         ? log_action::free
                       : r == CUDA_SUCCESS ? log_action::allocate
                                           : log_action::allocate_failure;
  log_host(a, p, bytes, -1, entry, r, event_clock());
}

void reset_host_after_fork() noexcept {
  g_live = nullptr;                  // the parent's pointers: not this process's to free
  new (&g_live_mutex) std::mutex{};  // a parent thread may have held it
  reset_process_chains_after_fork();
}

}  // namespace gpumem::shim
