"""Numba CUDA (driver API through cuda.bindings / cuGetProcAddress): device arrays
and a kernel; allocations must be served by gpumem's chain."""
import sys

import numpy
from numba import cuda

import shim_stats


@cuda.jit
def axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


before = shim_stats.read()
n = 1 << 20
x = numpy.arange(n, dtype=numpy.float32)
y = numpy.ones(n, dtype=numpy.float32)
for k in range(20):
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    dout = cuda.device_array_like(dx)
    axpy[(n + 255) // 256, 256](dout, numpy.float32(k), dx, dy)
    out = dout.copy_to_host()
    assert numpy.array_equal(out, k * x + y), k
    del dx, dy, dout
cuda.current_context().deallocations.clear()  # Numba defers its frees: flush them
print("NUMBA ok")
if "--expect-shim" in sys.argv:
    shim_stats.require_served("numba", before, shim_stats.read(), at_least=60)
print("PASS numba")
