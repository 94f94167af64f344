#pragma once
// Process-wide state of the simulated driver: configuration, devices, primary
// contexts, the calling thread's context stack, violations.
//
// Thread safety: the state is built once (first cuInit, thread-safe static);
// each device heap and each context has its own mutex. Lock order, when two are
// held: the list of created contexts, then context, then stream, then heap; never
// the other way round.

#include "device_heap.hpp"
#include "sim_api.hpp"

#include <array>
#include <cstdarg>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace gpumemsim {

struct stream;
struct mem_pool;

/// A context: a device's primary context, or one made by cuCtxCreate. Never
/// deleted: handles stay recognisable for the process (a destroyed one is reported).
struct context {
  int device = 0;
  bool primary = true;           ///< false: made by cuCtxCreate
  std::mutex mutex;              ///< guards refcount, destroyed, peers and streams
  int refcount = 0;              ///< primary-context retains; 1 for a created context until cuCtxDestroy
  bool destroyed = false;        ///< a created context after cuCtxDestroy
  std::uint64_t peers = 0;       ///< bit d: peer access to device d enabled (cuCtxEnablePeerAccess)
  stream* legacy = nullptr;      ///< the NULL / CU_STREAM_LEGACY stream
  std::vector<stream*> streams;  ///< other streams with possibly pending work
  bool active() {
    std::lock_guard lock(mutex);
    return refcount > 0;
  }
  bool is_destroyed() {
    std::lock_guard lock(mutex);
    return destroyed;
  }
};

struct device {
  int ordinal = 0;
  std::unique_ptr<device_heap> heap;
  context ctx;
  mem_pool* default_pool = nullptr;
  std::atomic<mem_pool*> current_pool{nullptr};
};

struct config {
  int device_count = 2;
  std::size_t device_memory = std::size_t{1} << 30;
  bool strict = false;
};

struct sim_state {
  config cfg;
  std::vector<std::unique_ptr<device>> devices;
};

/// The state; built on first use from the environment.
sim_state& state();
/// The device with this ordinal, or nullptr.
device* device_at(int ordinal) noexcept;
/// The device whose heap holds `ptr`, or nullptr.
device* device_of(std::uintptr_t ptr) noexcept;

/// Marks the driver initialised (cuInit).
void mark_initialized() noexcept;

/// The calling thread's current context (nullptr when none).
context* current_context() noexcept;
/// CUDA_ERROR_INVALID_CONTEXT unless the thread has an active current context
/// (CUDA_ERROR_CONTEXT_IS_DESTROYED when it is a destroyed created one).
CUresult require_context(context** out) noexcept;
/// The primary or live created context behind `h`, or nullptr.
context* context_from_handle(CUcontext h) noexcept;
/// Whether `h` is a created context that cuCtxDestroy destroyed.
bool destroyed_context(CUcontext h) noexcept;
/// A new created context on `device` (cuCtxCreate), with its own legacy stream.
context* create_context(int device);
/// Every primary context and every live created one.
std::vector<context*> all_contexts();
inline CUcontext to_handle(context* c) noexcept { return reinterpret_cast<CUcontext>(c); }
std::vector<context*>& context_stack() noexcept;

/// Counts a violation and prints it ("gpumemsim: violation: ...").
void violation(char const* fmt, ...) __attribute__((format(printf, 1, 2)));
long violation_count() noexcept;
void reset_violations() noexcept;
long call_count(char const* entry) noexcept;

/// Parses "123", "64KiB", "256MiB", "1GiB" (also KB/MB/GB, K/M/G as binary);
/// 0 when malformed.
std::size_t parse_size(char const* text) noexcept;

}  // namespace gpumemsim
