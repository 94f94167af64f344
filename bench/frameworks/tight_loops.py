"""Allocation-heavy loops of CuPy and Numba: what a program that allocates and frees
arrays every iteration pays under each allocator.

  cupy-pool      CuPy's own memory pool, no gpumem
  cupy-gpumem    CuPy's pool off (cupy.cuda.set_allocator(None): every array is a
                 cuMemAlloc and cuMemFree), under gpumem-run's default
  numba          Numba's own allocation (cuMemAlloc, frees deferred in batches)
  numba-gpumem   the same under gpumem-run's default
  numba-rmm      Numba with RAPIDS RMM's EMM plugin over an RMM pool
                 (NUMBA_CUDA_MEMORY_MANAGER=rmm.allocators.numba); skipped when rmm
                 does not import
  numba-rmm-cuda the plugin over RMM's default resource (cudaMalloc and cudaFree for
                 every array), as a user who only sets the variable gets it
  numba-pinned   Numba's pinned_array (cuMemHostAlloc each time), copied to a device
                 array, a kernel, copied back, both dropped
  numba-pinned-gpumem
                 the same under gpumem-run --host-pool (pinned blocks pooled)
  numba-managed  Numba's managed_array (cuMemAllocManaged each time), filled on the
                 host, a kernel on it, read back on the host, dropped
  numba-managed-gpumem
                 the same under gpumem-run --managed-pool (managed blocks pooled)

Each iteration takes the next size of 4 KiB .. 16 MiB (x4 steps). CuPy: empty, fill, two
elementwise ops (three arrays live at once). Numba: device_array and two kernels.
Configurations run interleaved for --rounds rounds, one process each; the figure is
µs per iteration over --iters iterations after a warm-up, the device synchronized
before the clock stops; the summary gives each configuration's median and range.

From the repository root on the GPU machine (Numba needs NumPy < 2.5 there: unpack one,
and the rmm, librmm and rapids-logger wheels, with pip install --target and name the
folders in --numba-path):
  python3 bench/frameworks/tight_loops.py --gpumem-run .carry/build-gpu/bin/gpumem-run --out OUT
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
CONFIGS = ["cupy-pool", "cupy-gpumem", "numba", "numba-gpumem", "numba-rmm", "numba-rmm-cuda", "numba-pinned",
           "numba-pinned-gpumem", "numba-managed", "numba-managed-gpumem"]


def cupy_loop(iters: int, warmup: int, pool: bool) -> float:
    import cupy as cp

    if not pool:
        cp.cuda.set_allocator(None)

    def step(i: int) -> None:
        n = SIZES[i % len(SIZES)] // 4
        a = cp.empty(n, cp.float32)
        a.fill(1.0)
        b = a * 2.0 + 1.0
        c = cp.sqrt(b) + a
        del a, b, c

    for i in range(warmup):
        step(i)
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    for i in range(iters):
        step(i)
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - start) / iters * 1e6


def numba_loop(iters: int, warmup: int, rmm_pool: bool) -> float:
    import numpy as np
    from numba import cuda

    if rmm_pool:
        import rmm

        rmm.reinitialize(pool_allocator=True)

    @cuda.jit
    def fill(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = i

    @cuda.jit
    def scale(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = a[i] * 2.0 + 1.0

    def step(i: int) -> None:
        n = SIZES[i % len(SIZES)] // 4
        d = cuda.device_array(n, np.float32)
        blocks = (n + 255) // 256
        fill[blocks, 256](d)
        scale[blocks, 256](d)
        del d

    for i in range(warmup):
        step(i)
    cuda.synchronize()
    start = time.perf_counter()
    for i in range(iters):
        step(i)
    cuda.synchronize()
    return (time.perf_counter() - start) / iters * 1e6


def numba_host_loop(iters: int, warmup: int, managed: bool) -> tuple[float, float]:
    """Host-visible arrays made and dropped every iteration. Pinned: a staging loop
    (pinned host array, to the device, a kernel, back). Managed: a managed array filled
    on the host, a kernel on it, read on the host. Returns the time per iteration and a
    checksum of what came back (equal under every allocator)."""
    import numpy as np
    from numba import cuda

    @cuda.jit
    def scale(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = a[i] * 2.0 + 1.0

    total = 0.0

    def step(i: int) -> None:
        nonlocal total
        n = SIZES[i % len(SIZES)] // 4
        blocks = (n + 255) // 256
        if managed:
            h = cuda.managed_array(n, np.float32)
            h[:] = i % 13
            scale[blocks, 256](h)
            cuda.synchronize()
        else:
            h = cuda.pinned_array(n, np.float32)
            h[:] = i % 13
            d = cuda.to_device(h)
            scale[blocks, 256](d)
            d.copy_to_host(h)
            del d
        total += float(h[0]) + float(h[-1])
        del h

    for i in range(warmup):
        step(i)
    cuda.synchronize()
    total = 0.0
    start = time.perf_counter()
    for i in range(iters):
        step(i)
    cuda.synchronize()
    return (time.perf_counter() - start) / iters * 1e6, total


def worker(config: str, iters: int, warmup: int) -> None:
    checksum = None
    if config.startswith("cupy"):
        us = cupy_loop(iters, warmup, pool=config == "cupy-pool")
    elif config.startswith(("numba-pinned", "numba-managed")):
        us, checksum = numba_host_loop(iters, warmup, managed=config.startswith("numba-managed"))
    else:
        # numba-rmm-cuda leaves RMM's default resource in place
        us = numba_loop(iters, warmup, rmm_pool=config == "numba-rmm")
    print(json.dumps({"config": config, "us_per_iter": us, "iters": iters, "checksum": checksum}), flush=True)


def command(config: str, args) -> tuple[list[str], dict[str, str]] | None:
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "NUMBA_CUDA_MEMORY_MANAGER"):
        env.pop(k, None)
    me = [sys.executable, str(Path(__file__).resolve()), "--worker", config, "--iters", str(args.iters)]
    if config.startswith("numba") and args.numba_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.numba_path, env.get("PYTHONPATH")]))
    if config.endswith("-gpumem"):
        pool = ["--host-pool"] if config.startswith("numba-pinned") else []
        pool += ["--managed-pool"] if config.startswith("numba-managed") else []
        report = ["--report-file", str(Path(args.out) / f"report-{config}.txt")]
        return [args.gpumem_run, *pool, *report, "--", *me], env
    if config.startswith("numba-rmm"):
        probe = subprocess.run([sys.executable, "-c", "import rmm.allocators.numba"], env=env, capture_output=True)
        if probe.returncode != 0:
            print(f"{config} skipped: rmm does not import ({probe.stderr.decode().strip().splitlines()[-1:]})")
            return None
        env["NUMBA_CUDA_MEMORY_MANAGER"] = "rmm.allocators.numba"
    return me, env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--gpumem-run", default=".carry/build-gpu/bin/gpumem-run")
    ap.add_argument("--out", default="tight-loops-out")
    ap.add_argument("--numba-path", default="", help="prepended to PYTHONPATH for the Numba configurations")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.iters, args.warmup)
        return
    Path(args.out).mkdir(parents=True, exist_ok=True)
    results: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for config in filter(None, args.configs.split(",")):
            cmd = command(config, args)
            if cmd is None:
                continue
            p = subprocess.run(cmd[0], env=cmd[1], capture_output=True, text=True)
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            if p.returncode != 0 or not lines:
                print(f"round {r + 1} {config}: exit {p.returncode}\n{p.stderr[-2000:]}")
                continue
            row = json.loads(lines[-1])
            us = row["us_per_iter"]
            results.setdefault(config, []).append(us)
            checksum = f" (checksum {row['checksum']})" if row.get("checksum") is not None else ""
            print(f"round {r + 1} {config}: {us:.1f} us/iteration{checksum}", flush=True)
    summary = {c: {"median": statistics.median(v), "min": min(v), "max": max(v), "runs": v} for c, v in results.items()}
    (Path(args.out) / "tight_loops.json").write_text(json.dumps(summary, indent=1))
    print("\n| configuration | us/iteration, median (min-max) |\n| --- | --- |")
    for c, s in summary.items():
        print(f"| {c} | {s['median']:.1f} ({s['min']:.1f}-{s['max']:.1f}) |")


if __name__ == "__main__":
    main()
