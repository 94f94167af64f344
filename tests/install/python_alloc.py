"""Run under gpumem-run with the simulated device on LD_LIBRARY_PATH (scripts/test-wheel).

Allocates device memory through the driver API the way CuPy does (ctypes over
libcuda.so.1) and checks, with the gpumem module, that the shim is active and served
every allocation. Prints the statistics and "python_alloc: ok".
"""
import ctypes
import sys

import gpumem


def fail(why):
    sys.exit("python_alloc: " + why)


if not gpumem.loaded():
    fail("gpumem.loaded() is False: run this under gpumem-run")
before = gpumem.stats()
cuda = ctypes.CDLL("libcuda.so.1")
for call, args in (("cuInit", (0,)),):
    if getattr(cuda, call)(*args) != 0:
        fail(call + " failed")
device = ctypes.c_int()
context = ctypes.c_void_p()
if cuda.cuDeviceGet(ctypes.byref(device), 0) != 0:
    fail("cuDeviceGet failed")
if cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) != 0:
    fail("cuDevicePrimaryCtxRetain failed")
if cuda.cuCtxSetCurrent(context) != 0:
    fail("cuCtxSetCurrent failed")

cu_mem_alloc = cuda.cuMemAlloc_v2
cu_mem_alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cu_mem_free = cuda.cuMemFree_v2
cu_mem_free.argtypes = [ctypes.c_uint64]
pointers = []
for i in range(16):
    p = ctypes.c_uint64()
    if cu_mem_alloc(ctypes.byref(p), 4096 << (i % 6)) != 0:
        fail("cuMemAlloc failed")
    pointers.append(p.value)
during = gpumem.stats()
for p in pointers:
    if cu_mem_free(p) != 0:
        fail("cuMemFree failed")
after = gpumem.stats()

print("gpumem.mode():", gpumem.mode())
print("gpumem.chain():", gpumem.chain())
print("gpumem.stats():", after)
if not gpumem.active():
    fail("gpumem.active() is False after allocating")
if after["chain_allocations"] - before["chain_allocations"] != 16:
    fail("the shim served {} of 16 allocations".format(after["chain_allocations"] - before["chain_allocations"]))
if during["live_allocations"] < 16 or after["chain_frees"] - before["chain_frees"] != 16:
    fail("live allocations or frees do not add up: {} / {}".format(during, after))
if not gpumem.chain():
    fail("no chain described for device 0")

# Pinned host memory, as Numba's pinned_array asks for it: counted by the host chain.
host_before = gpumem.host_stats()
cu_mem_host_alloc = cuda.cuMemHostAlloc
cu_mem_host_alloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]
cu_mem_free_host = cuda.cuMemFreeHost
cu_mem_free_host.argtypes = [ctypes.c_void_p]
pinned = ctypes.c_void_p()
if cu_mem_host_alloc(ctypes.byref(pinned), 1 << 20, 0) != 0:
    fail("cuMemHostAlloc failed")
host_during = gpumem.host_stats()
if cu_mem_free_host(pinned) != 0:
    fail("cuMemFreeHost failed")
host_after = gpumem.host_stats()
print("gpumem.host_stats():", host_after)
if host_before is None or host_during is None or not host_during["built"]:
    fail("gpumem.host_stats() does not show the host chain: {} / {}".format(host_before, host_during))
if host_during["allocations"] - host_before["allocations"] != 1 or host_after["frees"] - host_before["frees"] != 1:
    fail("pinned allocations or frees do not add up: {} / {} / {}".format(host_before, host_during, host_after))

# Managed memory, as Numba's managed_array asks for it: served by the managed chain.
managed_before = gpumem.managed_stats()
cu_mem_alloc_managed = cuda.cuMemAllocManaged
cu_mem_alloc_managed.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_uint]
managed = ctypes.c_uint64()
if cu_mem_alloc_managed(ctypes.byref(managed), 1 << 20, 1) != 0:  # CU_MEM_ATTACH_GLOBAL
    fail("cuMemAllocManaged failed")
managed_during = gpumem.managed_stats()
if cu_mem_free(managed.value) != 0:
    fail("cuMemFree of managed memory failed")
managed_after = gpumem.managed_stats()
print("gpumem.managed_stats():", managed_after)
if managed_before is None or managed_during is None or not managed_during["built"]:
    fail("gpumem.managed_stats() does not show the managed chain: {} / {}".format(managed_before, managed_during))
if (managed_during["allocations"] - managed_before["allocations"] != 1
        or managed_after["frees"] - managed_before["frees"] != 1 or managed_during["live_bytes"] < 1 << 20):
    fail("managed allocations or frees do not add up: {} / {} / {}".format(managed_before, managed_during,
                                                                          managed_after))
print("python_alloc: ok")
