#pragma once
// CUDA IPC on pooled memory. A block of a gpumem pool is not a CUDA allocation, so
// CUDA's own handle for it would name the pool's slab. gpumem hands out a handle of
// its own for such a pointer and shares the block's physical pages instead:
//
// Export (cuIpcGetMemHandle, cudaIpcGetMemHandle of memory a chain handed out, when
// its pages are exportable: the default pool maps 2 MiB pages created with POSIX
// file descriptor handles, vmm_memory_resource.hpp). The 64-byte handle names the
// allocation: a magic that no CUDA handle starts with, the exporter's pid and a
// random token of the process, the allocation's address, size and an export
// generation (so that a handle of freed memory never opens the address's next
// owner). At the first export the process starts a thread (every signal blocked)
// serving an abstract Unix socket named by pid and token. An allocation's first
// export waits for the device (below); later ones return the same handle at once.
//
// Import (cuIpcOpenMemHandle, cudaIpcOpenMemHandle of such a handle, in a process
// running gpumem): connects to the exporter, which checks the handle and sends each
// page covering the allocation as a file descriptor (cuMemRetainAllocationHandle,
// cuMemExportToShareableHandle; SCM_RIGHTS). The importer maps them into a range of
// its own (cuMemImportFromShareableHandle, cuMemMap) with read-write access for its
// current device and returns the allocation's first byte; a second open of the same
// handle returns the same pointer (counted, as CUDA does). The connection stays
// open as long as the import: its end (cuIpcCloseMemHandle, or the importer's exit)
// tells the exporter. Close waits for the importer's queued work (a copy from the
// mapping may still run; cuMemUnmap would not wait), then unmaps.
//
// Lifetimes: the exporter's free of an allocation with imports open is parked: the
// program sees it freed, and its pool gets the block back (so never reuses or
// releases its pages) only when the last import has closed. The importer's mapping
// holds the physical pages, so it stays valid after the exporter exits.
//
// Device reset (ipc_forget_device): the exporter's records of the device go (its
// handles no longer open; a parked block is never given back to the retired chain,
// whose memory the reset released), and so do the importer's imports on it
// opened in its primary context (unmapped before the reset, as CUDA's own imports
// die with the context; their connections end, which tells the exporters).
//
// Where it cannot work: memory whose pages cannot be exported (pools over
// cuMemAlloc slabs, a driver without shareable handles) keeps the policy of
// ipc_policy.hpp; a handle opened by a process not running gpumem fails in CUDA
// (it is not CUDA's); the README lists the combinations.
//
// Thread safety: all functions are thread-safe (one mutex per side; the socket
// work of an import runs without it). Cost to every other allocation: a free of
// chain memory makes two loads while no export is live, and takes the exporter's
// mutex for a map lookup while some are.

#include "serve/allocation_registry.hpp"

#include <cuda.h>

namespace gpumem::shim {

/// A gpumem handle for the allocation holding `p`, when it is memory a chain handed
/// out whose pages can be exported; CUDA_ERROR_NOT_SUPPORTED otherwise (CUDA's
/// memory, or pages that cannot be shared: the caller applies ipc_allowed()).
[[nodiscard]] CUresult ipc_export(void* p, CUipcMemHandle* out, const char* entry) noexcept;

/// Opens a gpumem handle; CUDA_ERROR_NOT_SUPPORTED when `h` is not one (CUDA's own).
[[nodiscard]] CUresult ipc_open(CUdeviceptr* out, CUipcMemHandle const& h, unsigned flags, const char* entry) noexcept;

/// Closes what ipc_open returned; CUDA_ERROR_NOT_SUPPORTED when `p` is not such a
/// pointer (CUDA's to answer).
[[nodiscard]] CUresult ipc_close(CUdeviceptr p, const char* entry) noexcept;

/// Called by a free of chain memory (the registry's record already taken): true
/// when imports of the allocation are open, and the free is parked until they close
/// (the caller reports success and gives nothing back). False otherwise; the export
/// record, if any, is dropped (its handles no longer open).
[[nodiscard]] bool ipc_park_free(void* p, allocation const& a) noexcept;

/// The device's context is about to be reset (cudaDeviceReset, a primary context
/// reset; the caller's context is the device's for the first): drops the export
/// records of the device's allocations (their handles no longer open, their parked
/// blocks are not given back), and ipc_forget_imports(device).
void ipc_forget_device(int device) noexcept;
/// ipc_forget_device()'s part for the imports (ipc_import.cpp): each import opened
/// in the device's primary context is unmapped after that context's queued work and
/// its connection ended (imports in contexts the program made stay); a later close
/// of its pointer is CUDA's to answer (a pointer CUDA does not know), with no driver
/// call on the range.
void ipc_forget_imports(int device) noexcept;

/// Bytes the program freed that are held back because another process still has
/// them open (requested sizes of the parked blocks).
[[nodiscard]] std::size_t ipc_parked_bytes() noexcept;

/// In a forked child: the parent's exports, imports and server are not the child's
/// (the child closes its copies of the parent's import connections, so that a worker
/// outliving its parent does not keep the parent's imports open).
void reset_ipc_after_fork() noexcept;
/// reset_ipc_after_fork()'s part for the imports (ipc_import.cpp).
void reset_ipc_imports_after_fork() noexcept;

}  // namespace gpumem::shim
