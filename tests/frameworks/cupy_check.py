"""CuPy with its memory pool disabled: every array is a device allocation that must
be served by gpumem's chain; results checked against NumPy."""
import sys

import cupy
import numpy

import shim_stats

cupy.cuda.set_allocator(None)  # no CuPy pool: each allocation reaches CUDA
before = shim_stats.read()
a = numpy.random.default_rng(0).standard_normal((512, 512)).astype(numpy.float32)
total = 0.0
for i in range(30):
    d = cupy.asarray(a) * (i + 1)
    e = d @ d.T
    total += float(e.trace())
    del d, e
expected = sum(float(numpy.trace((a * (i + 1)) @ (a * (i + 1)).T)) for i in range(30))
assert abs(total - expected) <= 1e-3 * abs(expected), (total, expected)
print(f"CUPY total={total:.3f} expected={expected:.3f}")
if "--expect-shim" in sys.argv:
    shim_stats.require_served("cupy", before, shim_stats.read(), at_least=60)
print("PASS cupy")
