#pragma once
// Which device pointers may be exported by IPC (cuIpcGetMemHandle,
// cudaIpcGetMemHandle): a handle names a whole CUDA allocation, so a block inside
// a pool slab cannot be exported; the refusal says what to run instead.
//
// Thread safety: reads the registry, which is thread-safe.

namespace gpumem::shim {

/// Whether a pooled pointer may be exported by IPC: only a whole upstream allocation
/// opens to the right memory in another process. Logs the refusal.
[[nodiscard]] bool ipc_allowed(void* p, const char* entry) noexcept;

}  // namespace gpumem::shim
