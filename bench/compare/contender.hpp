#pragma once
// The one interface every allocator in the side-by-side comparison implements, and the
// entry point of a contender plugin (a shared library the comparison dlopens).
//
// Self-contained on purpose: plugins are built against other libraries' headers (RMM
// needs CCCL 3.5, PyTorch's c10 its own toolchain), so this header names nothing of
// gpumem, CUDA or CCCL. A stream is CUDA's opaque CUstream_st*, the type behind both
// cudaStream_t and CUstream; nullptr is the legacy default stream.
//
// Rules for implementations:
//  - allocate / deallocate never throw and never print: a refusal (out of memory, any
//    error) is a nullptr from allocate; the harness counts it.
//  - allocate and deallocate are called from many threads at once (scaling), each
//    thread on its own stream; a contender that is not thread-safe says so in `kind`.
//  - destroying a contender returns what it holds to the device, so the next one
//    starts from an empty device (the harness creates one per measurement point).
//  - usage() is cheap enough to call after every allocation of a replay (not timed).

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

struct CUstream_st;

namespace gpumem_compare {

using stream_t = ::CUstream_st*;

/// Device memory an allocator holds (free or not), in bytes; known == false when the
/// allocator cannot tell (then the harness leaves the column empty).
struct memory_usage {
  std::uint64_t reserved = 0;       ///< held from the device now
  std::uint64_t peak_reserved = 0;  ///< most held at once since the contender was made
  bool known = false;
};

class contender {
 public:
  contender() = default;
  contender(contender const&) = delete;
  contender& operator=(contender const&) = delete;
  virtual ~contender() = default;

  /// `bytes` (> 0) ordered on `stream`; nullptr if the allocator refuses.
  virtual void* allocate(std::size_t bytes, stream_t stream) noexcept = 0;
  /// Frees `p` (from allocate, with the same bytes) in `stream`'s order.
  virtual void deallocate(void* p, std::size_t bytes, stream_t stream) noexcept = 0;
  /// An allocation the program expects to behave like cudaMalloc (usable at once on
  /// any stream). Stream-ordered allocators serve it on `stream`; gpumem's safe mode
  /// serves it from memory no queued work can touch.
  virtual void* allocate_synchronous(std::size_t bytes, stream_t stream) noexcept { return allocate(bytes, stream); }
  /// A free the program expects to behave like cudaFree (the device finished every
  /// earlier use before the memory is reused). Stream-ordered allocators have no such
  /// notion and free in stream order; gpumem's safe mode defers it.
  virtual void deallocate_synchronous(void* p, std::size_t bytes, stream_t stream) noexcept {
    deallocate(p, bytes, stream);
  }
  virtual memory_usage usage() noexcept { return {}; }
};

/// A kind of contender: how to make one, and what it is.
struct contender_kind {
  char const* name;         ///< short, unique, table row: "rmm pool"
  char const* family;       ///< "gpumem", "rmm", "cuda", "torch"
  char const* description;  ///< what exactly: "pool_memory_resource(cuda_memory_resource, initial 0)"
  /// A new contender on the calling thread's current device, or nullptr (then `why`,
  /// if given, receives a short static or thread-local message).
  contender* (*make)(char const** why);
};

/// Bumped whenever contender or contender_kind change layout or meaning.
inline constexpr int plugin_abi_version = 1;

// For plugins (C++17: the PyTorch plugin is built with torch's own settings).

/// Keeps `text` for the calling thread and points *why (if given) at it; returns 1,
/// the entry point's "failed".
inline int plugin_failure(char const** why, std::string text) {
  thread_local std::string message;
  message = std::move(text);
  if (why != nullptr) *why = message.c_str();
  return 1;
}

/// The entry point's first check: whether the harness speaks this header's ABI.
inline bool plugin_abi_matches(int abi_version, char const** why) {
  if (abi_version == plugin_abi_version) return true;
  plugin_failure(why, "built for another gpumem_compare plugin ABI");
  return false;
}

/// contender_kind::make for a contender whose constructor may throw: nullptr and the
/// exception's message in *why instead.
template <class Make>
contender* make_or_explain(Make&& make, char const** why) {
  try {
    return make();
  } catch (std::exception const& e) { plugin_failure(why, e.what()); } catch (...) {
    plugin_failure(why, "unknown exception");
  }
  return nullptr;
}

}  // namespace gpumem_compare

/// A plugin exports this C function. It fills *kinds and *count with a static array
/// and returns 0, or returns nonzero (abi_version not supported, initialization failed),
/// setting *why to a message.
extern "C" {
using gpumem_compare_plugin_fn = int (*)(int abi_version, gpumem_compare::contender_kind const** kinds, int* count,
                                         char const** why);
}
#define GPUMEM_COMPARE_PLUGIN_SYMBOL "gpumem_compare_plugin_v1"
