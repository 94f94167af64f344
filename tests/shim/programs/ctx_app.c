/* Test program: contexts the program creates itself (cuCtxCreate), next to the
 * primary contexts, on every device, switched with cuCtxPushCurrent/PopCurrent from
 * two threads. C, driver API through dlopen("libcuda.so.1"), no CUDA library linked.
 *
 *   ctx_app contexts [LIMIT_BYTES]
 *
 * What gpumem must do: serve the primary contexts' allocations from their device's
 * chain and pass every allocation made while a created context is current through
 * to CUDA, so no pool ever holds memory of two contexts. Checked through the
 * driver's own answer: CU_POINTER_ATTRIBUTE_CONTEXT of every pointer must be the
 * context that was current when it was allocated. LIMIT_BYTES (the GPUMEM_LIMIT the
 * run uses): cuMemGetInfo shows it in a primary context, the device in a created one.
 *
 *   ctx_app limit [LIMIT_BYTES]
 *
 * Memory allocated in a created context counts against the device's limit once the
 * device's chain exists: with a 64 MiB limit and 40 MiB pooled, 20 MiB in a created
 * context fit and 8 MiB more are refused (out of memory) until the 20 MiB are freed;
 * cuMemGetInfo in the primary context counts them as in use. Before the chain exists
 * (no allocation in the primary context yet) such memory is not limited. */
#include "app_support.h"

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*count_fn)(int*);
typedef CUresult (*retain_fn)(CUcontext*, CUdevice);
typedef CUresult (*release_fn)(CUdevice);
typedef CUresult (*create_fn)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice);
typedef CUresult (*ctx_fn)(CUcontext);
typedef CUresult (*pop_fn)(CUcontext*);
typedef CUresult (*alloc_fn)(CUdeviceptr*, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*alloc_async_fn)(CUdeviceptr*, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);
typedef CUresult (*stream_create_fn)(CUstream*, unsigned);
typedef CUresult (*stream_fn)(CUstream);
typedef CUresult (*attr_fn)(void*, CUpointer_attribute, CUdeviceptr);
typedef CUresult (*info_fn)(size_t*, size_t*);
typedef CUresult (*htod_fn)(CUdeviceptr, const void*, size_t);
typedef CUresult (*dtoh_fn)(void*, CUdeviceptr, size_t);

static struct {
  init_fn init;
  count_fn device_count;
  retain_fn primary_retain;
  release_fn primary_release;
  create_fn create;
  ctx_fn destroy, push, set_current;
  pop_fn pop;
  alloc_fn alloc;
  free_fn release;
  alloc_async_fn alloc_async;
  free_async_fn free_async;
  stream_create_fn stream_create;
  stream_fn stream_sync, stream_destroy;
  attr_fn attribute;
  info_fn info;
  htod_fn htod;
  dtoh_fn dtoh;
} cu;

static int load(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == NULL) return 0;
#define LOAD(field, name) cu.field = (__typeof__(cu.field))dlsym(lib, name)
  LOAD(init, "cuInit");
  LOAD(device_count, "cuDeviceGetCount");
  LOAD(primary_retain, "cuDevicePrimaryCtxRetain");
  LOAD(primary_release, "cuDevicePrimaryCtxRelease_v2");
  LOAD(create, "cuCtxCreate_v4");
  LOAD(destroy, "cuCtxDestroy_v2");
  LOAD(push, "cuCtxPushCurrent_v2");
  LOAD(pop, "cuCtxPopCurrent_v2");
  LOAD(set_current, "cuCtxSetCurrent");
  LOAD(alloc, "cuMemAlloc_v2");
  LOAD(release, "cuMemFree_v2");
  LOAD(alloc_async, "cuMemAllocAsync");
  LOAD(free_async, "cuMemFreeAsync");
  LOAD(stream_create, "cuStreamCreate");
  LOAD(stream_sync, "cuStreamSynchronize");
  LOAD(stream_destroy, "cuStreamDestroy_v2");
  LOAD(attribute, "cuPointerGetAttribute");
  LOAD(info, "cuMemGetInfo_v2");
  LOAD(htod, "cuMemcpyHtoD_v2");
  LOAD(dtoh, "cuMemcpyDtoH_v2");
#undef LOAD
  return cu.create != NULL && cu.destroy != NULL && cu.alloc != NULL && cu.attribute != NULL;
}

enum { devices = 2, rounds = 40, per_thread = rounds * 2 };

typedef struct {
  CUdeviceptr p;
  size_t bytes;
  CUcontext owner; /* current when it was allocated */
  int pooled;      /* allocated in a primary context: the chain's */
  unsigned char seed;
} block;

static CUcontext primary[devices];
static CUcontext created[devices];
static block blocks[devices][per_thread];

static int owner_is(CUdeviceptr p, CUcontext expected) {
  CUcontext owner = NULL;
  return cu.attribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p) == CUDA_SUCCESS && owner == expected;
}

static void fill(CUdeviceptr p, size_t n, unsigned char seed) {
  unsigned char* host = (unsigned char*)malloc(n);
  for (size_t i = 0; i < n; ++i) host[i] = (unsigned char)(seed + i * 13U);
  APP_CHECK_EQ(cu.htod(p, host, n), CUDA_SUCCESS);
  free(host);
}

static int holds(CUdeviceptr p, size_t n, unsigned char seed) {
  unsigned char* host = (unsigned char*)malloc(n);
  int ok = cu.dtoh(host, p, n) == CUDA_SUCCESS;
  for (size_t i = 0; ok && i < n; ++i) ok = host[i] == (unsigned char)(seed + i * 13U);
  free(host);
  return ok;
}

/* One thread per device: alternately push the created and the primary context,
 * allocate (sync and stream-ordered), pop. */
static void* worker(void* arg) {
  int const d = (int)(intptr_t)arg;
  APP_CHECK_EQ(cu.push(created[d]), CUDA_SUCCESS);
  CUstream s = NULL;
  APP_CHECK_EQ(cu.stream_create(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS); /* a stream of the created context */
  CUcontext popped = NULL;
  APP_CHECK_EQ(cu.pop(&popped), CUDA_SUCCESS);
  for (int i = 0; i < per_thread; ++i) {
    int const pooled = i % 2;
    CUcontext const c = pooled ? primary[d] : created[d];
    block* b = &blocks[d][i];
    b->bytes = ((size_t)256 << (unsigned)(i % 9)) + (size_t)i * 8;
    b->owner = c;
    b->pooled = pooled;
    b->seed = (unsigned char)(d * 101 + i);
    APP_CHECK_EQ(cu.push(c), CUDA_SUCCESS);
    if (!pooled && i % 4 == 0) {
      APP_CHECK_EQ(cu.alloc_async(&b->p, b->bytes, s), CUDA_SUCCESS);
      APP_CHECK_EQ(cu.stream_sync(s), CUDA_SUCCESS);
    } else {
      APP_CHECK_EQ(cu.alloc(&b->p, b->bytes), CUDA_SUCCESS);
    }
    fill(b->p, b->bytes, b->seed);
    APP_CHECK_EQ(cu.pop(&popped), CUDA_SUCCESS);
    APP_CHECK(popped == c);
  }
  APP_CHECK_EQ(cu.push(created[d]), CUDA_SUCCESS);
  APP_CHECK_EQ(cu.stream_destroy(s), CUDA_SUCCESS);
  APP_CHECK_EQ(cu.pop(&popped), CUDA_SUCCESS);
  return NULL;
}

static void contexts(size_t limit) {
  APP_CHECK_EQ(cu.init(0), CUDA_SUCCESS);
  int n = 0;
  APP_CHECK_EQ(cu.device_count(&n), CUDA_SUCCESS);
  APP_CHECK(n >= devices);
  for (int d = 0; d < devices; ++d) {
    APP_CHECK_EQ(cu.primary_retain(&primary[d], d), CUDA_SUCCESS);
    APP_CHECK_EQ(cu.create(&created[d], NULL, 0, d), CUDA_SUCCESS);
    CUcontext popped = NULL;
    APP_CHECK_EQ(cu.pop(&popped), CUDA_SUCCESS); /* cuCtxCreate made it current */
    APP_CHECK(popped == created[d] && created[d] != primary[d]);
  }
  pthread_t threads[devices];
  for (int d = 0; d < devices; ++d) pthread_create(&threads[d], NULL, worker, (void*)(intptr_t)d);
  for (int d = 0; d < devices; ++d) pthread_join(threads[d], NULL);

  gpumem_shim_stats st = app_stats();
  int const shim = st.mode == GPUMEM_SHIM_MODE_ACTIVE;
  if (shim) {
    APP_CHECK_EQ(st.chains, devices);
    APP_CHECK_EQ(st.chain_allocations, devices * rounds);
    APP_CHECK_EQ(st.passthrough_allocations, devices * rounds);
  }
  /* Memory info: a primary context sees its chain (and limit), a created one CUDA's device. */
  for (int d = 0; d < devices; ++d) {
    size_t f_primary = 0, t_primary = 0, f_created = 0, t_created = 0;
    APP_CHECK_EQ(cu.push(primary[d]), CUDA_SUCCESS);
    APP_CHECK_EQ(cu.info(&f_primary, &t_primary), CUDA_SUCCESS);
    APP_CHECK_EQ(cu.set_current(created[d]), CUDA_SUCCESS);
    APP_CHECK_EQ(cu.info(&f_created, &t_created), CUDA_SUCCESS);
    CUcontext popped = NULL;
    APP_CHECK_EQ(cu.pop(&popped), CUDA_SUCCESS);
    printf("MEMINFO device=%d primary free=%zu total=%zu created free=%zu total=%zu\n", d, f_primary, t_primary,
           f_created, t_created);
    if (shim && limit != 0) {
      APP_CHECK_EQ(t_primary, limit);
      APP_CHECK(t_created > limit);
    }
  }
  /* Every pointer belongs to the context that was current: none of a created
   * context came from a pool, none of a primary one from a created context. Each is
   * checked and freed with the other device's created context current. Memory a
   * created context took from the device's memory pool (cuMemAllocAsync) belongs to
   * no context (CUDA reports NULL) and is read with its own context current. */
  for (int d = 0; d < devices; ++d) {
    APP_CHECK_EQ(cu.push(created[1 - d]), CUDA_SUCCESS);
    for (int i = 0; i < per_thread; ++i) {
      block const* b = &blocks[d][i];
      int const stream_ordered = !b->pooled && i % 4 == 0;
      if (stream_ordered) {
        APP_CHECK(owner_is(b->p, NULL));
        APP_CHECK_EQ(cu.push(b->owner), CUDA_SUCCESS);
        APP_CHECK(holds(b->p, b->bytes, b->seed));
        CUcontext own = NULL;
        APP_CHECK_EQ(cu.pop(&own), CUDA_SUCCESS);
        APP_CHECK_EQ(cu.release(b->p), CUDA_SUCCESS);
        continue;
      }
      /* Pool memory mapped with cuMemCreate (the default chain's vmm) belongs to no
       * context either, as the driver's memory pool's. */
      if (!owner_is(b->p, b->owner) && !(b->pooled && owner_is(b->p, NULL))) {
        CUcontext owner = NULL;
        CUresult const r = cu.attribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, b->p);
        fprintf(stderr, "device %d block %d (%s, %zu bytes): wrong owning context (attribute %d: %p, expected %p)\n", d,
                i, b->pooled ? "primary" : "created", b->bytes, (int)r, (void*)owner, (void*)b->owner);
        ++app_failures;
      }
      APP_CHECK(holds(b->p, b->bytes, b->seed));
      if (b->pooled && i % 3 == 0) {
        /* A pool block, stream-ordered on a stream of another device's created context. */
        APP_CHECK_EQ(cu.free_async(b->p, NULL), CUDA_SUCCESS);
      } else {
        APP_CHECK_EQ(cu.release(b->p), CUDA_SUCCESS);
      }
    }
    APP_CHECK_EQ(cu.stream_sync(NULL), CUDA_SUCCESS);
    CUcontext popped = NULL;
    APP_CHECK_EQ(cu.pop(&popped), CUDA_SUCCESS);
  }
  for (int d = 0; d < devices; ++d) {
    APP_CHECK_EQ(cu.destroy(created[d]), CUDA_SUCCESS);
    APP_CHECK_EQ(cu.primary_release(d), CUDA_SUCCESS);
  }
  st = app_stats();
  if (shim) {
    APP_CHECK_EQ(st.chain_frees, devices * rounds);
    APP_CHECK_EQ(st.passthrough_frees, devices * rounds);
    APP_CHECK_EQ(st.double_frees, 0);
    APP_CHECK_EQ(st.live_allocations, 0);
  }
}

/* Allocates `bytes` with `c` current; returns CUDA's answer. */
static CUresult alloc_in(CUcontext c, CUdeviceptr* p, size_t bytes) {
  APP_CHECK_EQ(cu.push(c), CUDA_SUCCESS);
  CUresult const r = cu.alloc(p, bytes);
  CUcontext popped = NULL;
  APP_CHECK_EQ(cu.pop(&popped), CUDA_SUCCESS);
  return r;
}

static void free_in(CUcontext c, CUdeviceptr p) {
  APP_CHECK_EQ(cu.push(c), CUDA_SUCCESS);
  APP_CHECK_EQ(cu.release(p), CUDA_SUCCESS);
  CUcontext popped = NULL;
  APP_CHECK_EQ(cu.pop(&popped), CUDA_SUCCESS);
}

static void limit(size_t limit) {
  size_t const MiB = (size_t)1 << 20;
  APP_CHECK_EQ(cu.init(0), CUDA_SUCCESS);
  CUcontext prim = NULL, own = NULL, popped = NULL;
  APP_CHECK_EQ(cu.primary_retain(&prim, 0), CUDA_SUCCESS);
  APP_CHECK_EQ(cu.create(&own, NULL, 0, 0), CUDA_SUCCESS);
  APP_CHECK_EQ(cu.pop(&popped), CUDA_SUCCESS);
  int const limited = app_shim_active() && limit == 64 * MiB;
  /* Before the device's chain exists: not limited. */
  CUdeviceptr early = 0;
  APP_CHECK_EQ(alloc_in(own, &early, 8 * MiB), CUDA_SUCCESS);
  CUdeviceptr pooled = 0, a = 0, b = 0;
  APP_CHECK_EQ(alloc_in(prim, &pooled, 40 * MiB), CUDA_SUCCESS); /* builds the chain */
  APP_CHECK_EQ(alloc_in(own, &a, 20 * MiB), CUDA_SUCCESS);       /* 60 MiB of 64 */
  CUresult const over = alloc_in(own, &b, 8 * MiB);
  if (limited) {
    APP_CHECK_EQ(over, CUDA_ERROR_OUT_OF_MEMORY);
  } else {
    APP_CHECK_EQ(over, CUDA_SUCCESS);
    free_in(own, b);
  }
  size_t f = 0, t = 0;
  APP_CHECK_EQ(cu.push(prim), CUDA_SUCCESS);
  APP_CHECK_EQ(cu.info(&f, &t), CUDA_SUCCESS);
  APP_CHECK_EQ(cu.pop(&popped), CUDA_SUCCESS);
  printf("MEMINFO primary free=%zu total=%zu\n", f, t);
  if (limited) {
    APP_CHECK_EQ(t, 64 * MiB);
    APP_CHECK_EQ(f, 4 * MiB); /* 40 MiB pooled and 20 MiB in the created context in use */
  }
  free_in(own, a); /* its charge goes back: the 8 MiB fit now */
  APP_CHECK_EQ(alloc_in(own, &b, 8 * MiB), CUDA_SUCCESS);
  free_in(own, b);
  free_in(own, early);
  free_in(prim, pooled);
  APP_CHECK_EQ(cu.push(prim), CUDA_SUCCESS);
  APP_CHECK_EQ(cu.info(&f, &t), CUDA_SUCCESS);
  APP_CHECK_EQ(cu.pop(&popped), CUDA_SUCCESS);
  printf("MEMINFO after free=%zu total=%zu\n", f, t);
  if (limited) APP_CHECK_EQ(f, 64 * MiB);
  APP_CHECK_EQ(cu.destroy(own), CUDA_SUCCESS);
  APP_CHECK_EQ(cu.primary_release(0), CUDA_SUCCESS);
  if (app_shim_active()) {
    gpumem_shim_stats const st = app_stats();
    APP_CHECK_EQ(st.failed_allocations, limited ? 1ULL : 0ULL);
    APP_CHECK_EQ(st.live_allocations, 0);
  }
}

int main(int argc, char** argv) {
  const char* scenario = argc > 1 ? argv[1] : "contexts";
  if (!load()) {
    fprintf(stderr, "no libcuda.so.1 with cuCtxCreate_v4: %s\n", dlerror());
    return 2;
  }
  if (strcmp(scenario, "contexts") == 0) {
    contexts(argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 0);
  } else if (strcmp(scenario, "limit") == 0) {
    limit(argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 0);
  } else {
    fprintf(stderr, "unknown scenario %s\n", scenario);
    return 2;
  }
  return app_finish(scenario);
}
