/* Query API of libgpumem_shim.so, for tests and tools.
 *
 * Look the functions up with dlsym(RTLD_DEFAULT, "gpumem_shim_get_stats"): a
 * program must run unchanged without the shim. Counters are process-wide and reset
 * in a forked child. */
#ifndef GPUMEM_SHIM_H
#define GPUMEM_SHIM_H

#ifdef __cplusplus
extern "C" {
#endif

/** What the shim does with calls. */
enum gpumem_shim_mode {
  GPUMEM_SHIM_MODE_UNINITIALIZED = 0, /**< no CUDA call seen yet */
  GPUMEM_SHIM_MODE_ACTIVE = 1,        /**< allocations go through the resource chains */
  GPUMEM_SHIM_MODE_DISABLED = 2,      /**< GPUMEM_DISABLE=1: pure pass-through */
  GPUMEM_SHIM_MODE_CONFIG_ERROR = 3   /**< bad config: pass-through (on_error = passthrough) or exit(1) */
};

/* NOLINTNEXTLINE(modernize-use-using): a C header */
typedef struct gpumem_shim_stats {
  int mode;                                   /**< enum gpumem_shim_mode */
  int chains;                                 /**< device chains built so far */
  unsigned long long chain_allocations;       /**< allocations served by a chain */
  unsigned long long runtime_allocations;     /**< ... of which entered through a runtime entry point */
  unsigned long long chain_frees;             /**< chain allocations freed */
  unsigned long long passthrough_allocations; /**< handed to CUDA: captured, other pools, created contexts */
  unsigned long long passthrough_frees;       /**< frees handed to CUDA (pass-through or unknown pointers) */
  unsigned long long double_frees;            /**< frees of chain pointers already freed (refused) */
  unsigned long long failed_allocations;      /**< allocation calls that returned an error */
  unsigned long long live_allocations;        /**< registered (chain + pass-through) and not freed */
  unsigned long long live_bytes;              /**< their requested bytes */
  unsigned long long reserved_bytes;          /**< held from the devices by all chains now */
  unsigned long long pending_free_bytes;      /**< safe mode: freed, waiting for a reclamation barrier */
  unsigned long long reclaim_barriers;        /**< device-wide GPU-side barriers (no host wait) so far */
  unsigned long long captured_passthroughs;   /**< stream-ordered allocations on capturing streams */
  unsigned long long active_captures;         /**< stream captures active now */
  unsigned long long ipc_refused;             /**< IPC handle requests refused for pooled pointers */
  unsigned long long device_syncs;            /**< host-blocking device synchronizations gpumem made */
  unsigned long long ipc_parked_bytes;        /**< freed by the program but held back: another process
                                                   still has it open by IPC (requested bytes) */
} gpumem_shim_stats;

/** Fills *out (sizeof(gpumem_shim_stats) bytes). Returns 0, or -1 for NULL. */
int gpumem_shim_get_stats(gpumem_shim_stats* out);

/** Pinned host memory (cudaHostAlloc, cudaMallocHost, cuMemHostAlloc, cuMemAllocHost and
 *  their frees): the host chain, one for the process. */
/* NOLINTNEXTLINE(modernize-use-using): a C header */
typedef struct gpumem_shim_host_stats {
  int built;                         /**< 1 once the host chain served a call */
  int pooled;                        /**< 1 when freed blocks are cached (GPUMEM_HOST_POOL, [host] pool) */
  unsigned long long allocations;    /**< pinned allocations the host chain served */
  unsigned long long frees;          /**< ... and freed */
  unsigned long long passthroughs;   /**< calls handed to CUDA (registrations, no context) */
  unsigned long long live_bytes;     /**< held by the program now (the pool's block sizes) */
  unsigned long long reserved_bytes; /**< pinned memory held from CUDA now */
  unsigned long long waiting_bytes;  /**< freed, waiting for the GPU's earlier copies (safe mode) */
  unsigned long long fences;         /**< GPU-side barriers made for freed blocks */
  unsigned long long waits;          /**< times the host waited for the GPU (at the pool's maximum) */
} gpumem_shim_host_stats;

/** Fills *out (sizeof(gpumem_shim_host_stats) bytes); all zero until the host chain
 *  is built. Returns 0, or -1 for NULL. */
int gpumem_shim_get_host_stats(gpumem_shim_host_stats* out);

/** Managed memory (cudaMallocManaged, cuMemAllocManaged and their frees): the managed
 *  chain, one for the process. The same fields, for that chain ("pooled":
 *  GPUMEM_MANAGED_POOL, [managed] pool). */
/* NOLINTNEXTLINE(modernize-use-using): a C header */
typedef gpumem_shim_host_stats gpumem_shim_managed_stats;

/** Fills *out; all zero until the managed chain is built. Returns 0, or -1 for NULL. */
int gpumem_shim_get_managed_stats(gpumem_shim_managed_stats* out);

/** The chain of `device` as text ("pool(...) -> cuda"), "" when none is built. Returns
 *  the length written without the NUL (truncated to len - 1), or -1. */
int gpumem_shim_describe_chain(int device, char* buf, unsigned long len);

/** Gives back to the device what the chain of `device` (-1: of every device) caches,
 *  until at most `keep` cached bytes (device memory held, less the bytes the program
 *  holds) stay in each; *released (may be NULL) receives the bytes given back. Waits
 *  for the device's queued work (as cudaMemPoolTrimTo may). Returns 0, also when no
 *  chain is built or gpumem is disabled; -1 for a device outside -1..63, while a
 *  stream capture is active (nothing is given back: a wait would break it), or when
 *  a chain could not trim (what others gave back is still counted). */
int gpumem_shim_trim(int device, unsigned long long keep, unsigned long long* released);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_SHIM_H */
