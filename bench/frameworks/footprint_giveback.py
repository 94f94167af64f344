"""Does memory a program frees go back to the device? With PyTorch's cache off every
tensor below is its own cudaMalloc/cudaFree, so under gpumem this asks whether the
pool keeps what was freed or returns it.

Allocates tensors of random sizes (1..256 MiB, fixed seed) until about 8 GiB are live,
frees them all, synchronizes and waits 0.5 s, synchronizes again once gpumem's default
release window (10 s) has passed, then calls gpumem.trim() where the gpumem module has
one. Prints one JSON line: the GPU's used memory (NVML, the whole device)
and the shim's live/reserved/pending bytes at each point: before allocating, at the
peak, after the frees, a window later, after the trim.

footprint_run.py --giveback runs it under gpumem; by hand:
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 gpumem-run -- python3 footprint_giveback.py
"""
import argparse
import json
import os
import random
import time

import torch

from footprint_common import gpumem, shim_counters
from footprint_nvml import MIB, Reader

SETTLE_S = 0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=8.0, help="bytes to allocate, in GiB (default %(default)s)")
    ap.add_argument("--min-mib", type=int, default=1)
    ap.add_argument("--max-mib", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--window-s", type=float, default=11.0,
                    help="wait before the second synchronization (default %(default)s; 0: none)")
    ap.add_argument("--nvml-index", type=int, default=0, help="the GPU as NVML numbers it (default %(default)s)")
    a = ap.parse_args()
    if not 1 <= a.min_mib <= a.max_mib or a.gib <= 0:
        ap.error("need 1 <= --min-mib <= --max-mib and --gib > 0")

    reader = Reader(a.nvml_index)
    points = {}

    def point(name: str) -> None:
        torch.cuda.synchronize()
        counters = shim_counters()
        points[name] = {
            "nvml_used_mib": reader.read(),
            "gpumem": None if counters is None else
            {k: counters[k] for k in ("live_bytes", "reserved_bytes", "pending_free_bytes")},
        }

    torch.zeros(1, device="cuda")  # the CUDA context exists before the first reading
    point("before")
    sizes = random.Random(a.seed)
    target = int(a.gib * 2**30)
    tensors = []
    total = 0
    while total < target:
        n = sizes.randint(a.min_mib, a.max_mib) * MIB
        tensors.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
        total += n
    count = len(tensors)
    point("peak")
    tensors.clear()
    torch.cuda.synchronize()
    time.sleep(SETTLE_S)
    point("after_free")
    if a.window_s > 0:
        # No allocation in the window: gpumem's default release threshold (auto) now
        # keeps nothing, and the synchronization in point() gives the rest back.
        time.sleep(a.window_s)
        point("after_window")
    trim = getattr(gpumem, "trim", None)
    if trim is not None:
        trim()
        torch.cuda.synchronize()
        time.sleep(SETTLE_S)
        point("after_trim")
    print(json.dumps({
        "check": "giveback",
        "tensors": count,
        "allocated_bytes": total,
        "pytorch_caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") != "1",
        "trim": "called" if trim is not None else "unavailable",
        "nvml_backend": reader.backend,
        "points": points,
    }), flush=True)


if __name__ == "__main__":
    main()
