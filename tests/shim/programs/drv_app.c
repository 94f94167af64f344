/* Test programs (b) and (c): a C program that links no CUDA library and reaches the
 * driver the way CuPy, Numba and the static runtime do.
 *   drv_app dlsym : dlsym(dlopen("libcuda.so.1"), "cuMemAlloc_v2") ...
 *   drv_app gpa   : dlsym(libcuda, "cuGetProcAddress_v2"), which is asked for
 *                   "cuGetProcAddress" itself and then for the memory functions at
 *                   several cudaVersions and with the per-thread-stream flag.
 *   drv_app vmm   : device memory the program creates and maps itself (cuMemCreate,
 *                   as XLA does), run with GPUMEM_LIMIT=64MiB: the limit covers it
 *                   and pooled allocations together, and memory released while
 *                   still mapped until its unmap.
 *   drv_app vmm_own_context : the same call while a context the program made
 *                   (cuCtxCreate) is current: counted, but no chain is built for it,
 *                   so gpumem never makes the device's primary context.
 *   drv_app release : synchronizations and the default pool's trim and attributes
 *                   through dlsym and cuGetProcAddress: memory the pool caches goes
 *                   back to the device (src/shim/serve/release.hpp). */
#include "app_support.h"

#include <cuda.h>
#include <stdint.h>

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*dev_get_fn)(CUdevice*, int);
typedef CUresult (*retain_fn)(CUcontext*, CUdevice);
typedef CUresult (*set_ctx_fn)(CUcontext);
typedef CUresult (*alloc_fn)(CUdeviceptr*, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*alloc_async_fn)(CUdeviceptr*, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);
typedef CUresult (*sync_fn)(void);
typedef CUresult (*gpa_fn)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

static void* lib;

static void make_context(void) {
  APP_CHECK_EQ(((init_fn)dlsym(lib, "cuInit"))(0), CUDA_SUCCESS);
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  APP_CHECK_EQ(((dev_get_fn)dlsym(lib, "cuDeviceGet"))(&dev, 0), CUDA_SUCCESS);
  APP_CHECK_EQ(((retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain"))(&ctx, dev), CUDA_SUCCESS);
  APP_CHECK_EQ(((set_ctx_fn)dlsym(lib, "cuCtxSetCurrent"))(ctx), CUDA_SUCCESS);
}

/* Allocations and frees through whatever pointers the scenario resolved. */
static void exercise(alloc_fn alloc, free_fn release, alloc_async_fn alloc_async, free_async_fn free_async) {
  CUdeviceptr d[4] = {0, 0, 0, 0};
  APP_CHECK_EQ(alloc(&d[0], 1024), CUDA_SUCCESS);
  APP_CHECK_EQ(alloc(&d[1], 1 << 20), CUDA_SUCCESS);
  APP_CHECK_EQ(alloc_async(&d[2], 4096, NULL), CUDA_SUCCESS);
  APP_CHECK(d[0] != 0 && d[1] != 0 && d[2] != 0);
  APP_CHECK_EQ(alloc(&d[3], 0), CUDA_ERROR_INVALID_VALUE);
  APP_CHECK_EQ(alloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
  APP_CHECK_EQ(release(0), CUDA_SUCCESS);
  APP_CHECK_EQ(release((CUdeviceptr)0xdeadbeef00ULL), CUDA_ERROR_INVALID_VALUE); /* unknown: CUDA's answer */
  APP_CHECK_EQ(release(d[0]), CUDA_SUCCESS);
  APP_CHECK_EQ(release(d[0]), CUDA_ERROR_INVALID_VALUE); /* double */
  APP_CHECK_EQ(free_async(d[1], NULL), CUDA_SUCCESS);    /* sync memory, stream-ordered free */
  APP_CHECK_EQ(release(d[2]), CUDA_SUCCESS);             /* async memory, synchronous free */
  APP_CHECK_EQ(free_async((CUdeviceptr)0xdeadbeef00ULL, NULL), CUDA_ERROR_INVALID_VALUE);
  app_sim_reset_violations(); /* the unknown pointers above were on purpose */
}

static void by_dlsym(void) {
  make_context();
  exercise((alloc_fn)dlsym(lib, "cuMemAlloc_v2"), (free_fn)dlsym(lib, "cuMemFree_v2"),
           (alloc_async_fn)dlsym(lib, "cuMemAllocAsync"), (free_async_fn)dlsym(lib, "cuMemFreeAsync"));
  /* RTLD_DEFAULT binds to the shim's exports: the same hooks. */
  APP_CHECK(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") == dlsym(lib, "cuMemAlloc_v2"));
  /* Names that only start with "cu" are never touched. */
  APP_CHECK(dlsym(lib, "cudnnCreate") == NULL);
  gpumem_shim_stats st = app_stats();
  APP_CHECK_EQ(st.chain_allocations, 3);
  APP_CHECK_EQ(st.chain_frees, 3);
  APP_CHECK_EQ(st.double_frees, 1);
  APP_CHECK_EQ(st.live_allocations, 0);
}

static void by_proc_address(void) {
  make_context();
  gpa_fn gpa_v2 = (gpa_fn)dlsym(lib, "cuGetProcAddress_v2");
  APP_CHECK(gpa_v2 != NULL);
  void* self = NULL;
  CUdriverProcAddressQueryResult q;
  APP_CHECK_EQ(gpa_v2("cuGetProcAddress", &self, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q), CUDA_SUCCESS);
  APP_CHECK(self == (void*)gpa_v2); /* asking for the resolver gives the shim's resolver */
  gpa_fn gpa = (gpa_fn)self;
  void* fns[8] = {0};
  APP_CHECK_EQ(gpa("cuMemAlloc", &fns[0], 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q), CUDA_SUCCESS);
  APP_CHECK_EQ(gpa("cuMemAlloc", &fns[1], 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q), CUDA_SUCCESS);
  APP_CHECK_EQ(gpa("cuMemFree", &fns[2], 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q), CUDA_SUCCESS);
  APP_CHECK_EQ(gpa("cuMemAllocAsync", &fns[3], 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q), CUDA_SUCCESS);
  APP_CHECK_EQ(gpa("cuMemFreeAsync", &fns[4], 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q), CUDA_SUCCESS);
  APP_CHECK_EQ(gpa("cuMemAllocAsync", &fns[5], 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q), CUDA_SUCCESS);
  /* Old ABI and unknown names: whatever the real resolver says, never a hook. (Real
   * CUDA: v1 pointer / success with SYMBOL_NOT_FOUND; a driver may also refuse.) */
  CUresult const v1 = gpa("cuMemAlloc", &fns[6], 3000, CU_GET_PROC_ADDRESS_DEFAULT, &q);
  CUresult const unknown = gpa("cuNoSuchThing", &fns[7], 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q);
  APP_CHECK(unknown != CUDA_SUCCESS || (q == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && fns[7] == NULL));
  APP_CHECK(fns[0] == dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
  APP_CHECK(fns[0] == fns[1]);
  APP_CHECK(fns[3] == dlsym(RTLD_DEFAULT, "cuMemAllocAsync_ptsz")); /* the ptsz hook for the ptsz ABI */
  APP_CHECK(fns[5] == dlsym(RTLD_DEFAULT, "cuMemAllocAsync"));
  APP_CHECK(v1 != CUDA_SUCCESS || fns[6] != fns[0]); /* the 32-bit v1 ABI (or none): never our hook */
  exercise((alloc_fn)fns[0], (free_fn)fns[2], (alloc_async_fn)fns[3], (free_async_fn)fns[4]);
  gpumem_shim_stats st = app_stats();
  APP_CHECK_EQ(st.chain_allocations, 3);
  APP_CHECK_EQ(st.chain_frees, 3);
  APP_CHECK_EQ(st.live_allocations, 0);
}

typedef CUresult (*create_fn)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*reserve_fn)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*addr_free_fn)(CUdeviceptr, size_t);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*set_access_fn)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
typedef CUresult (*memset_fn)(CUdeviceptr, unsigned char, size_t);
typedef CUresult (*dtoh_fn)(void*, CUdeviceptr, size_t);
typedef CUresult (*info_fn)(size_t*, size_t*);

static void created_by_the_program(void) {
  const size_t mib = (size_t)1 << 20;
  make_context();
  create_fn create = (create_fn)dlsym(lib, "cuMemCreate");
  release_fn release = (release_fn)dlsym(lib, "cuMemRelease");
  alloc_fn alloc = (alloc_fn)dlsym(lib, "cuMemAlloc_v2");
  free_fn release_alloc = (free_fn)dlsym(lib, "cuMemFree_v2");
  info_fn info = (info_fn)dlsym(lib, "cuMemGetInfo_v2");
  APP_CHECK(create == dlsym(RTLD_DEFAULT, "cuMemCreate")); /* the shim's hook */
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0, big = 0;
  APP_CHECK_EQ(create(&h, 32 * mib, &prop, 0), CUDA_SUCCESS);
  size_t free_bytes = 0, total = 0;
  APP_CHECK_EQ(info(&free_bytes, &total), CUDA_SUCCESS);
  APP_CHECK_EQ(total, 64 * mib);
  APP_CHECK(free_bytes <= 32 * mib);
  /* Over the limit, created or pooled: refused as out of memory. */
  APP_CHECK_EQ(create(&big, 48 * mib, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr d = 0;
  APP_CHECK_EQ(alloc(&d, 40 * mib), CUDA_ERROR_OUT_OF_MEMORY);
  APP_CHECK_EQ(alloc(&d, 16 * mib), CUDA_SUCCESS);
  /* The created memory works where the program maps it. */
  CUdeviceptr va = 0;
  APP_CHECK_EQ(((reserve_fn)dlsym(lib, "cuMemAddressReserve"))(&va, 32 * mib, 0, 0, 0), CUDA_SUCCESS);
  APP_CHECK_EQ(((map_fn)dlsym(lib, "cuMemMap"))(va, 32 * mib, 0, h, 0), CUDA_SUCCESS);
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  APP_CHECK_EQ(((set_access_fn)dlsym(lib, "cuMemSetAccess"))(va, 32 * mib, &access, 1), CUDA_SUCCESS);
  APP_CHECK_EQ(((memset_fn)dlsym(lib, "cuMemsetD8_v2"))(va + 32 * mib - 4, 0x5a, 4), CUDA_SUCCESS);
  unsigned char back[4] = {0, 0, 0, 0};
  APP_CHECK_EQ(((dtoh_fn)dlsym(lib, "cuMemcpyDtoH_v2"))(back, va + 32 * mib - 4, 4), CUDA_SUCCESS);
  APP_CHECK(back[0] == 0x5a && back[3] == 0x5a);
  APP_CHECK_EQ(((unmap_fn)dlsym(lib, "cuMemUnmap"))(va, 32 * mib), CUDA_SUCCESS);
  APP_CHECK_EQ(((addr_free_fn)dlsym(lib, "cuMemAddressFree"))(va, 32 * mib), CUDA_SUCCESS);
  /* Released: its part of the limit is free again. */
  APP_CHECK_EQ(release(h), CUDA_SUCCESS);
  APP_CHECK_EQ(create(&big, 48 * mib, &prop, 0), CUDA_SUCCESS);
  APP_CHECK_EQ(release(big), CUDA_SUCCESS);
  APP_CHECK_EQ(release_alloc(d), CUDA_SUCCESS);
  /* Released while mapped (a pattern CUDA's programming guide shows): CUDA keeps the memory
     until the unmap, and so does the limit. */
  CUmemGenericAllocationHandle kept = 0;
  APP_CHECK_EQ(create(&kept, 32 * mib, &prop, 0), CUDA_SUCCESS);
  APP_CHECK_EQ(((reserve_fn)dlsym(lib, "cuMemAddressReserve"))(&va, 32 * mib, 0, 0, 0), CUDA_SUCCESS);
  APP_CHECK_EQ(((map_fn)dlsym(lib, "cuMemMap"))(va, 32 * mib, 0, kept, 0), CUDA_SUCCESS);
  APP_CHECK_EQ(release(kept), CUDA_SUCCESS);
  APP_CHECK_EQ(create(&big, 48 * mib, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  APP_CHECK_EQ(((unmap_fn)dlsym(lib, "cuMemUnmap"))(va, 32 * mib), CUDA_SUCCESS);
  APP_CHECK_EQ(((addr_free_fn)dlsym(lib, "cuMemAddressFree"))(va, 32 * mib), CUDA_SUCCESS);
  APP_CHECK_EQ(create(&big, 48 * mib, &prop, 0), CUDA_SUCCESS);
  APP_CHECK_EQ(release(big), CUDA_SUCCESS);
  gpumem_shim_stats st = app_stats();
  APP_CHECK_EQ(st.passthrough_allocations, 4);
  APP_CHECK_EQ(st.passthrough_frees, 4);
  APP_CHECK_EQ(st.failed_allocations, 3);
}

typedef CUresult (*ctx_create_fn)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice);
typedef CUresult (*primary_state_fn)(CUdevice, unsigned*, int*);

static void created_in_own_context(void) {
  APP_CHECK_EQ(((init_fn)dlsym(lib, "cuInit"))(0), CUDA_SUCCESS);
  CUcontext own = NULL;
  APP_CHECK_EQ(((ctx_create_fn)dlsym(lib, "cuCtxCreate_v4"))(&own, NULL, 0, 0), CUDA_SUCCESS);
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0;
  APP_CHECK_EQ(((create_fn)dlsym(lib, "cuMemCreate"))(&h, (size_t)4 << 20, &prop, 0), CUDA_SUCCESS);
  APP_CHECK_EQ(((release_fn)dlsym(lib, "cuMemRelease"))(h), CUDA_SUCCESS);
  unsigned flags = 0;
  int active = -1;
  APP_CHECK_EQ(((primary_state_fn)dlsym(lib, "cuDevicePrimaryCtxGetState"))(0, &flags, &active), CUDA_SUCCESS);
  APP_CHECK_EQ(active, 0);
  gpumem_shim_stats st = app_stats();
  APP_CHECK_EQ(st.chains, 0);
  APP_CHECK_EQ(st.passthrough_allocations, 1);
  APP_CHECK_EQ(st.passthrough_frees, 1);
}

typedef CUresult (*stream_sync_fn)(CUstream);
typedef CUresult (*default_pool_fn)(CUmemoryPool*, CUdevice);
typedef CUresult (*trim_to_fn)(CUmemoryPool, size_t);
typedef CUresult (*pool_attr_fn)(CUmemoryPool, CUmemPool_attribute, void*);
typedef size_t (*sim_bytes_fn)(int);

/* Device memory held (the simulated device's count; 0 on a real GPU, where this
 * scenario is not run). */
static size_t held(void) {
  sim_bytes_fn f = (sim_bytes_fn)app_sim_symbol("gpumemsim_live_bytes");
  return f != NULL ? f(0) : 0;
}

static void allocate_and_free(alloc_fn alloc, free_fn release, size_t mib) {
  CUdeviceptr d[32];
  for (size_t i = 0; i < mib; ++i) APP_CHECK_EQ(alloc(&d[i], (size_t)1 << 20), CUDA_SUCCESS);
  for (size_t i = 0; i < mib; ++i) APP_CHECK_EQ(release(d[i]), CUDA_SUCCESS);
}

static void release_cached(void) {
  const size_t mib = (size_t)1 << 20;
  make_context();
  alloc_fn alloc = (alloc_fn)dlsym(lib, "cuMemAlloc_v2");
  free_fn release = (free_fn)dlsym(lib, "cuMemFree_v2");
  sync_fn ctx_sync = (sync_fn)dlsym(lib, "cuCtxSynchronize");
  gpa_fn gpa = (gpa_fn)dlsym(lib, "cuGetProcAddress_v2");
  /* The resolver hands out the shim's synchronizations, the per-thread one for the
   * per-thread ABI. */
  void* fns[2] = {0, 0};
  CUdriverProcAddressQueryResult q;
  APP_CHECK_EQ(gpa("cuStreamSynchronize", &fns[0], 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q),
               CUDA_SUCCESS);
  APP_CHECK_EQ(gpa("cuCtxSynchronize", &fns[1], 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q), CUDA_SUCCESS);
  APP_CHECK(fns[0] == dlsym(RTLD_DEFAULT, "cuStreamSynchronize_ptsz"));
  APP_CHECK(fns[1] == (void*)ctx_sync);
  stream_sync_fn stream_sync = (stream_sync_fn)fns[0];
  /* Auto: kept at the first synchronization (the interval needed it), given back at
   * the second (the next one did not). */
  allocate_and_free(alloc, release, 24);
  APP_CHECK(held() >= 24 * mib);
  APP_CHECK_EQ(ctx_sync(), CUDA_SUCCESS);
  APP_CHECK(held() >= 24 * mib);
  APP_CHECK_EQ(stream_sync(NULL), CUDA_SUCCESS);
  APP_CHECK(held() <= 2 * mib);
  /* The default pool's trim and attributes. */
  CUmemoryPool pool = NULL;
  APP_CHECK_EQ(((default_pool_fn)dlsym(lib, "cuDeviceGetDefaultMemPool"))(&pool, 0), CUDA_SUCCESS);
  pool_attr_fn get = (pool_attr_fn)dlsym(lib, "cuMemPoolGetAttribute");
  pool_attr_fn set = (pool_attr_fn)dlsym(lib, "cuMemPoolSetAttribute");
  cuuint64_t zero = 0;
  APP_CHECK_EQ(set(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero), CUDA_SUCCESS);
  allocate_and_free(alloc, release, 16);
  cuuint64_t used_high = 0;
  cuuint64_t reserved = 0;
  APP_CHECK_EQ(get(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &used_high), CUDA_SUCCESS);
  APP_CHECK_EQ(get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
  APP_CHECK_EQ(used_high, 16 * mib);
  APP_CHECK(reserved >= 16 * mib);
  APP_CHECK_EQ(((trim_to_fn)dlsym(lib, "cuMemPoolTrimTo"))(pool, 0), CUDA_SUCCESS);
  APP_CHECK(held() <= 2 * mib);
  APP_CHECK_EQ(get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
  APP_CHECK(reserved <= 2 * mib);
  /* A threshold the program sets: that many cached bytes stay at synchronizations. */
  cuuint64_t threshold = 8 * mib;
  APP_CHECK_EQ(set(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
  allocate_and_free(alloc, release, 16);
  APP_CHECK_EQ(ctx_sync(), CUDA_SUCCESS);
  APP_CHECK(held() >= 8 * mib && held() <= 10 * mib);
}

int main(int argc, char** argv) {
  const char* scenario = argc > 1 ? argv[1] : "dlsym";
  lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == NULL) {
    fprintf(stderr, "no libcuda.so.1: %s\n", dlerror());
    return 2;
  }
  if (strcmp(scenario, "dlsym") == 0) {
    by_dlsym();
  } else if (strcmp(scenario, "gpa") == 0) {
    by_proc_address();
  } else if (strcmp(scenario, "vmm") == 0) {
    created_by_the_program();
  } else if (strcmp(scenario, "vmm_own_context") == 0) {
    created_in_own_context();
  } else if (strcmp(scenario, "release") == 0) {
    release_cached();
  } else {
    fprintf(stderr, "unknown scenario %s\n", scenario);
    return 2;
  }
  return app_finish(scenario);
}
