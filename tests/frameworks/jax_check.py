"""JAX (XLA's GPU client, driver API through its own dlopen of libcuda): a jitted
loss and gradient over shapes that change every step, checked against the same
computation on JAX's CPU backend; allocations must be served by gpumem's chain.

Run it twice: with XLA's default allocator (its BFC arena: one large allocation up
front, XLA_PYTHON_CLIENT_MEM_FRACTION of the device) and with
XLA_PYTHON_CLIENT_ALLOCATOR=platform (every buffer its own allocation and free,
as PyTorch with its cache off). --min-served N: the chain must serve at least N."""
import argparse

import numpy

import jax
import jax.numpy as jnp

import shim_stats

parser = argparse.ArgumentParser()
parser.add_argument("--expect-shim", action="store_true")
parser.add_argument("--min-served", type=int, default=1)
args = parser.parse_args()

gpu = [d for d in jax.devices() if d.platform == "gpu"]
if not gpu:
    raise SystemExit("jax: no GPU device (jax.devices() = %s)" % jax.devices())
cpu = jax.devices("cpu")[0]
before = shim_stats.read()


def loss(w, x, y):
    return jnp.mean((jnp.tanh(x @ w) - y) ** 2)


step = jax.jit(jax.value_and_grad(loss))
rng = numpy.random.default_rng(7)
for k, rows in enumerate([256, 1024, 4096, 512, 8192, 2048, 16384, 777]):
    w = rng.standard_normal((1024, 512), dtype=numpy.float32) / 32
    x = rng.standard_normal((rows, 1024), dtype=numpy.float32)
    y = rng.standard_normal((rows, 512), dtype=numpy.float32)
    on_gpu = step(*(jax.device_put(a, gpu[0]) for a in (w, x, y)))
    on_cpu = step(*(jax.device_put(a, cpu) for a in (w, x, y)))
    for g, c in zip(jax.tree_util.tree_leaves(on_gpu), jax.tree_util.tree_leaves(on_cpu)):
        g = numpy.asarray(g)
        c = numpy.asarray(c)
        # TF32 matmuls on the GPU: compare loosely, but a wrong buffer is far off.
        if not numpy.allclose(g, c, rtol=2e-2, atol=2e-3):
            raise SystemExit(f"jax: step {k} ({rows} rows): GPU and CPU differ, max |diff| {numpy.abs(g - c).max()}")
    del on_gpu
print("JAX ok")
if args.expect_shim:
    shim_stats.require_served("jax", before, shim_stats.read(), at_least=args.min_served)
print("PASS jax")
