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
  /// True while the shim serves cudaFree/cuMemFree: the program expects the device
  /// to be idle before the memory can be reused (real cuMemFree synchronizes), so
  /// deferred_free_resource_adaptor holds such blocks until a synchronization.
  bool synchronous_free = false;
};

/// The calling thread's context. Cheap: one TLS access.
[[nodiscard]] inline call_context& current_call() noexcept {
  static thread_local call_context ctx{};
  return ctx;
}

/// Sets the calling thread's context for one scope, restoring the previous one.
class scoped_call_context {
 public:
  scoped_call_context(const char* entry_point, int device, bool synchronous_free = false) noexcept
      : saved_{current_call()} {
    current_call() = call_context{entry_point, device, synchronous_free};
  }
  ~scoped_call_context() { current_call() = saved_; }
  scoped_call_context(scoped_call_context const&) = delete;
  scoped_call_context& operator=(scoped_call_context const&) = delete;

 private:
  call_context saved_;
};

}  // namespace gpumem
