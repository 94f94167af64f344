"""The workload of FIELD_NOTES §2: an 8-layer MLP, 2048 wide, AdamW, PyTorch.

Prints ms/step for each batch size: the mean over all timed steps (ms_per_step,
the synchronizations below included), the median over blocks of --block steps, each
ended by a synchronization (block_median: a run the host's neighbours disturbed for a
moment keeps its steady figure), the median GPU-timeline time of one step between
events recorded at step boundaries (gpu_median), and the median time the host takes to
queue one step, steps that end a block left out (host_median). host_median well below
gpu_median: the GPU sets the pace; about equal: the host does, and allocator calls count.
Under libgpumem_shim.so it also prints what the shim did during the timed steps
(allocations and reclamation barriers a step, growth of reserved memory). Run it three
ways, side by side in one job:
  python3 pytorch_mlp.py                                   # PyTorch's caching allocator
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 pytorch_mlp.py  # every allocation a cudaMalloc/cudaFree
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 gpumem-run -- python3 pytorch_mlp.py  # those through gpumem
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

# The shim's counters (ctypes), shared with the framework checks; without them the
# script still runs, it only prints no counters.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "frameworks"))
try:
    import shim_stats
except ImportError:
    shim_stats = None


def read_shim_stats():
    """The shim's counters, or None (the shim not loaded, or its reader not found)."""
    return shim_stats.read() if shim_stats is not None else None


def make_model(width: int, depth: int) -> torch.nn.Module:
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*layers).cuda()


def run(batch: int, steps: int, warmup: int, width: int, depth: int, block: int) -> dict:
    torch.manual_seed(0)
    model = make_model(width, depth)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    loss = None
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    blocks = []
    queued = []  # host time to queue one step, steps that end a block left out
    before = None
    for i in range(warmup + steps):
        if i == warmup:
            torch.cuda.synchronize()
            before = read_shim_stats()
            t0 = t_block = time.perf_counter()
        if i >= warmup:
            marks[i - warmup].record()
            t_step = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if i < warmup:
            continue
        if not (block and (i - warmup + 1) % block == 0):
            queued.append((time.perf_counter() - t_step) * 1e3)
        else:
            torch.cuda.synchronize()
            now = time.perf_counter()
            blocks.append((now - t_block) * 1e3 / block)
            t_block = now
    marks[steps].record()
    torch.cuda.synchronize()
    out = {"ms_per_step": (time.perf_counter() - t0) * 1e3 / steps}
    if blocks:
        out["block_median"] = statistics.median(blocks)
    out["gpu_median"] = statistics.median(marks[k].elapsed_time(marks[k + 1]) for k in range(steps))
    if queued:
        out["host_median"] = statistics.median(queued)
    after = read_shim_stats()
    if before is not None and after is not None:
        out["allocations_per_step"] = (after["chain_allocations"] - before["chain_allocations"]) / steps
        out["barriers_per_step"] = (after["reclaim_barriers"] - before["reclaim_barriers"]) / steps
        out["reserved_growth_mib"] = (after["reserved_bytes"] - before["reserved_bytes"]) / 2**20
    out["final_loss"] = float(loss.item())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--block", type=int, default=10, help="steps between synchronizations (0: none)")
    ap.add_argument("--label", default=os.environ.get("MLP_LABEL", "run"))
    a = ap.parse_args()
    caching = os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") not in ("1", "true", "True")
    for b in (int(s) for s in a.batches.split(",")):
        if caching:
            torch.cuda.reset_peak_memory_stats()
        r = run(b, a.steps, a.warmup, a.width, a.depth, a.block)
        memory = ""
        if caching:  # PyTorch's own peaks; with its cache off gpumem's report has them
            memory = (f" max_reserved={torch.cuda.max_memory_reserved()}"
                      f" max_allocated={torch.cuda.max_memory_allocated()}")
            torch.cuda.empty_cache()
        timing = " ".join(f"{k}={v:.3f}" for k, v in r.items() if k != "final_loss")
        print(f"mlp label={a.label} batch={b} {timing} final_loss={r['final_loss']:.6f}{memory}", flush=True)


if __name__ == "__main__":
    main()
