/* Reaches the CUDA driver the way CuPy does (dlopen libcuda.so.1, dlsym), allocates
 * and frees, and checks through the shim's query API (gpumem/gpumem_shim.h) that
 * gpumem served every allocation. Run it under gpumem-run; prints
 * "driver_app: ok, gpumem served N allocations". */
#include <gpumem/gpumem_shim.h>

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*dev_get_fn)(CUdevice*, int);
typedef CUresult (*retain_fn)(CUcontext*, CUdevice);
typedef CUresult (*set_ctx_fn)(CUcontext);
typedef CUresult (*alloc_fn)(CUdeviceptr*, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef int (*stats_fn)(gpumem_shim_stats*);

static void* must(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == NULL) {
    fprintf(stderr, "driver_app: %s not found\n", name);
    exit(1);
  }
  return f;
}

static void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "driver_app: %s failed (%d)\n", what, (int)r);
    exit(1);
  }
}

int main(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == NULL) {
    fprintf(stderr, "driver_app: %s\n", dlerror());
    return 1;
  }
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  check(((init_fn)must(lib, "cuInit"))(0), "cuInit");
  check(((dev_get_fn)must(lib, "cuDeviceGet"))(&dev, 0), "cuDeviceGet");
  check(((retain_fn)must(lib, "cuDevicePrimaryCtxRetain"))(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(((set_ctx_fn)must(lib, "cuCtxSetCurrent"))(ctx), "cuCtxSetCurrent");
  alloc_fn alloc = (alloc_fn)must(lib, "cuMemAlloc_v2");
  free_fn release = (free_fn)must(lib, "cuMemFree_v2");
  CUdeviceptr d[8];
  for (int i = 0; i < 8; ++i) check(alloc(&d[i], (size_t)4096 << i), "cuMemAlloc");
  for (int i = 0; i < 8; ++i) check(release(d[i]), "cuMemFree");

  /* Present only when the shim is preloaded: a program must run unchanged without it. */
  stats_fn get_stats = (stats_fn)dlsym(RTLD_DEFAULT, "gpumem_shim_get_stats");
  if (get_stats == NULL) {
    fprintf(stderr, "driver_app: gpumem's shim is not loaded (run it under gpumem-run)\n");
    return 1;
  }
  gpumem_shim_stats st;
  if (get_stats(&st) != 0 || st.mode != GPUMEM_SHIM_MODE_ACTIVE || st.chain_allocations != 8 || st.chain_frees != 8) {
    fprintf(stderr, "driver_app: shim mode %d served %llu allocations and %llu frees, expected 8 and 8\n", st.mode,
            st.chain_allocations, st.chain_frees);
    return 1;
  }
  printf("driver_app: ok, gpumem served %llu allocations\n", st.chain_allocations);
  return 0;
}
