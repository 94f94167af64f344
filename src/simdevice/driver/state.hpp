#pragma once
// Process-wide state of the simulated driver: configuration, devices, primary
// contexts, contexts made by cuCtxCreate, green contexts, the calling thread's
// context stack, violations.
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
#include <utility>
#include <vector>

namespace gpumemsim {

struct stream;
struct mem_pool;
struct green_context;

/// A context: a device's primary context, one made by cuCtxCreate, or the context
/// of a green context (cuCtxFromGreenCtx). Never deleted: handles stay
/// recognisable for the process (a destroyed one is reported).
struct context {
  int device = 0;
  bool primary = true;             ///< false: made by cuCtxCreate or cuGreenCtxCreate
  green_context* green = nullptr;  ///< set: the context of this green context
  std::mutex mutex;                ///< guards refcount, destroyed, peers, streams and start_waits
  int refcount = 0;                ///< primary-context retains; 1 for a created or green context until destroyed
  bool destroyed = false;          ///< a created context after cuCtxDestroy, a green one after cuGreenCtxDestroy
  std::uint64_t peers = 0;         ///< bit d: peer access to device d enabled (cuCtxEnablePeerAccess)
  stream* legacy = nullptr;        ///< the NULL / CU_STREAM_LEGACY stream
  stream* recorder = nullptr;      ///< a green context's internal stream for cuGreenCtxRecordEvent
  std::vector<stream*> streams;    ///< other streams with possibly pending work
  /// Operations (stream, number) that every stream made in this context from now
  /// on waits for before its own work (cuGreenCtxWaitEvent).
  std::vector<std::pair<stream*, std::uint64_t>> start_waits;
  bool active() {
    std::lock_guard lock(mutex);
    return refcount > 0;
  }
  bool is_destroyed() {
    std::lock_guard lock(mutex);
    return destroyed;
  }
};

/// A green context (cuGreenCtxCreate; the CUgreenCtx handle points here). Its
/// work runs in `ctx`, a context of its own (own legacy stream, own streams) on
/// the device of the primary context it retains; memory allocated while `ctx` is
/// current belongs to that primary context. Never deleted.
struct green_context {
  context* ctx = nullptr;
  context* primary = nullptr;
  unsigned sm_count = 0;  ///< SMs of the descriptor it was made from
  std::uint64_t id = 0;   ///< cuGreenCtxGetId
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
/// Every context whose streams may hold work: every primary context, every live
/// created one and every green one (destroyed ones too: their streams outlive them).
std::vector<context*> all_contexts();
inline CUcontext to_handle(context* c) noexcept { return reinterpret_cast<CUcontext>(c); }

/// A new green context on `device` (cuGreenCtxCreate) over `sm_count` SMs; the
/// caller retains the primary context for it.
green_context* create_green_context(int device, unsigned sm_count);
/// The green context behind `h`: CUDA_ERROR_INVALID_CONTEXT when unknown,
/// CUDA_ERROR_CONTEXT_IS_DESTROYED (+ violation) when destroyed.
CUresult resolve_green(CUgreenCtx h, char const* entry, green_context** out) noexcept;
/// The green contexts made from `primary`, destroyed ones included.
std::vector<context*> green_contexts_of(context const* primary);
inline CUgreenCtx to_handle(green_context* g) noexcept { return reinterpret_cast<CUgreenCtx>(g); }
/// For the context of a green context, the primary context it is made from;
/// otherwise `c`. Memory allocated while `c` is current belongs to it (guessed);
/// its events may be recorded for c's green context (documented) and on c's
/// streams (guessed).
inline context* base_context(context* c) noexcept { return c->green != nullptr ? c->green->primary : c; }

/// cuDevicePrimaryCtxRetain / cuDevicePrimaryCtxRelease on device `ordinal`
/// (valid); the last release resets the primary context. Release:
/// CUDA_ERROR_INVALID_CONTEXT when it was not retained.
context* retain_primary(int ordinal);
CUresult release_primary(int ordinal);

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
