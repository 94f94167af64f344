"""JAX (XLA's GPU client, driver API through its own dlopen of libcuda): a jitted
loss and gradient over shapes that change every step, checked against the same
computation on JAX's CPU backend.

XLA's default allocator (its BFC arena, a fraction of the device's memory up front)
and its "platform" allocator create and map device memory themselves (cuMemCreate):
gpumem cannot pool that memory, only limit, count and log it (--min-created N: at
least N such creations seen by the shim; --max-limit BYTES: XLA's own limit, sized
from cudaMemGetInfo, must be at most BYTES). With XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async
XLA allocates each buffer from the device's default memory pool, which gpumem serves
(--min-served N: the chain must serve at least N)."""
import argparse

import numpy

import jax
import jax.numpy as jnp

import shim_stats

parser = argparse.ArgumentParser()
parser.add_argument("--expect-shim", action="store_true")
parser.add_argument("--min-served", type=int, default=0)
parser.add_argument("--min-created", type=int, default=0)
parser.add_argument("--max-limit", type=int, default=0)
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
stats = gpu[0].memory_stats() or {}
print("jax: XLA's memory_stats:", {k: v for k, v in stats.items() if k in ("bytes_limit", "peak_bytes_in_use", "pool_bytes")})
if args.max_limit and not 0 < stats.get("bytes_limit", 0) <= args.max_limit:
    raise SystemExit(f"jax: XLA's bytes_limit {stats.get('bytes_limit')} is not within gpumem's limit {args.max_limit}")
if args.expect_shim:
    after = shim_stats.read()
    shim_stats.require_served("jax", before, after, at_least=args.min_served)
    made = after["passthrough_allocations"] - before["passthrough_allocations"]
    if made < args.min_created:
        raise SystemExit(f"jax: the shim saw {made} allocations XLA created itself, expected >= {args.min_created}")
print("PASS jax")
