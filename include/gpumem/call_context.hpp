#pragma once
// What the current allocation call is, as seen from inside a resource chain.
//
// The shim sets this (thread-local) at each interposed entry point so adaptors
// down the chain can attribute their work — the logging adaptor writes `entry`
// and `device` into its CSV rows — without widening the resource interface.
// A library user who never sets it gets entry "allocate"/"free" and the device
// of the current context.

namespace gpumem {

struct call_context {
  const char* entry_point = nullptr;  ///< "cudaMalloc", "cuMemAllocAsync", ...; nullptr: library call
  int device = -1;                    ///< device ordinal; -1: unknown (current)
  /// Synchronous semantics (the shim's safe mode sets it for cudaMalloc/cuMemAlloc/
  /// pitch allocations and for cudaFree/cuMemFree, and for any free of memory that
  /// was allocated synchronously):
  /// - an allocation must be usable at once by any stream, so a caching resource
  ///   hands out only memory no queued GPU work can still touch;
  /// - a free promises only that the program issued all work using the block
  ///   before it (real cuMemFree synchronizes the device), on any stream, so a
  ///   caching resource reuses the block only after a device-wide barrier
  ///   (stream_tracker). The stream argument of such calls is irrelevant.
  /// False: RMM's stream-ordered semantics on the given stream.
  bool synchronous = false;
};

/// The calling thread's context. Cheap: one TLS access.
[[nodiscard]] inline call_context& current_call() noexcept {
  static thread_local call_context ctx{};
  return ctx;
}

/// Sets the calling thread's context for one scope, restoring the previous one.
class scoped_call_context {
 public:
  scoped_call_context(const char* entry_point, int device, bool synchronous = false) noexcept : saved_{current_call()} {
    current_call() = call_context{entry_point, device, synchronous};
  }
  ~scoped_call_context() { current_call() = saved_; }
  scoped_call_context(scoped_call_context const&) = delete;
  scoped_call_context& operator=(scoped_call_context const&) = delete;

 private:
  call_context saved_;
};

/// Marks the calling thread's calls synchronous (call_context::synchronous) for one
/// scope, keeping the entry point and device: a caching resource growing from its
/// upstream wants memory that is usable at once on every stream.
class scoped_synchronous_call {
 public:
  scoped_synchronous_call() noexcept : saved_{current_call().synchronous} { current_call().synchronous = true; }
  ~scoped_synchronous_call() { current_call().synchronous = saved_; }
  scoped_synchronous_call(scoped_synchronous_call const&) = delete;
  scoped_synchronous_call& operator=(scoped_synchronous_call const&) = delete;

 private:
  bool saved_;
};

}  // namespace gpumem
