"""Numba CUDA (driver API through cuda.bindings / cuGetProcAddress): device arrays
made, copied and read back; allocations must be served by gpumem's chain.

No @cuda.jit kernel: numba-cuda 0.30's compiler fails to import with NumPy 2.5
(np.row_stack is gone) on the GPU machine, with or without gpumem; device arrays
and copies reach the same allocation entry points."""
import sys

import numpy
from numba import cuda

import shim_stats

before = shim_stats.read()
n = 1 << 20
for k in range(20):
    x = numpy.arange(n, dtype=numpy.float32) * k
    dx = cuda.to_device(x)                      # cuMemAlloc + copy in
    dy = cuda.device_array_like(dx)             # cuMemAlloc
    dy.copy_to_device(dx)                       # device-to-device copy
    dz = cuda.device_array(n // 2 + k, dtype=numpy.int64)
    dz.copy_to_device(numpy.full(n // 2 + k, k, dtype=numpy.int64))
    assert numpy.array_equal(dy.copy_to_host(), x), k
    assert numpy.array_equal(dz.copy_to_host(), numpy.full(n // 2 + k, k)), k
    del dx, dy, dz
cuda.current_context().deallocations.clear()  # Numba defers its frees: flush them
print("NUMBA ok")
if "--expect-shim" in sys.argv:
    shim_stats.require_served("numba", before, shim_stats.read(), at_least=60)
print("PASS numba")
