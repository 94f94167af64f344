/* Control API of the simulated device (src/simdevice): exported by the sim's
 * libcuda.so.1, absent from NVIDIA's. Tests reach it through
 * tests/support/sim_control.hpp, which looks the symbols up with dlsym so the
 * same test binaries still run (and skip sim-only checks) on a real GPU. */
#ifndef GPUMEMSIM_H
#define GPUMEMSIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** 1: this libcuda.so.1 is the simulated device. */
int gpumemsim_present(void);
/** Strictness violations counted since start or the last reset. */
long gpumemsim_violations(void);
void gpumemsim_reset_violations(void);
/** Live (not yet freed, including pending async frees) allocations and their
 *  rounded bytes on one device; 0 for an unknown device. The bytes also count
 *  exported VMM memory this process let go of (another process may map it). */
size_t gpumemsim_live_allocations(int device);
size_t gpumemsim_live_bytes(int device);
/** Run every pending stream operation of every context, as if all streams were
 *  synchronized (captured work is not run). */
void gpumemsim_run_all(void);
/** How many times an exported entry point ran, by its exported name
 *  ("cuMemAlloc_v2", "cuStreamWaitEvent", ...); 0 if never. "*": all of them. */
long gpumemsim_call_count(const char* entry);
/** Resize one device; ignored (with a message on stderr) while anything is live. */
void gpumemsim_set_device_memory(int device, size_t bytes);
/** POSIX fd shareable handles of cuMemCreate: 1 (the default) supported; 0 not
 *  (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED says 0 and the
 *  request is CUDA_ERROR_NOT_SUPPORTED); 2 the attribute says 1 but the request is
 *  still CUDA_ERROR_NOT_SUPPORTED, as some drivers do. */
void gpumemsim_set_posix_fd_handles(int mode);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEMSIM_H */
