"""Child processes of a program running under gpumem:

- a PyTorch DataLoader with worker processes (fork, Linux's default) started after the
  parent holds CUDA memory: each worker has the shim (inherited with the process image)
  and starts clean (no chain, nothing live), and the batches it makes are right;
- a `multiprocessing` spawn child that uses CUDA: it loads the shim afresh (LD_PRELOAD
  is inherited), starts from zero, its own allocations are served by its chain, and its
  result equals the parent's computation of the same thing.

    python3 fork_spawn_check.py [--expect-shim]
"""
import math
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset

import shim_stats


class Numbers(Dataset):
    """Item i: i * ones(64), plus the worker's view of the shim when it made it."""

    def __len__(self):
        return 256

    def __getitem__(self, i):
        s = shim_stats.read()
        snapshot = (-1, -1, -1, -1) if s is None else (s["mode"], s["chains"], s["live_allocations"],
                                                      s["chain_allocations"])
        return torch.full((64,), float(i)), torch.tensor(snapshot + (os.getpid(),), dtype=torch.int64)


def cuda_work(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(1024, 1024, device="cuda", generator=g)
    b = torch.randn(1024, 1024, device="cuda", generator=g)
    return float((a @ b).relu().sum().item())


def spawn_child(queue, seed):
    first = shim_stats.read()
    result = cuda_work(seed)
    last = shim_stats.read()
    queue.put((first, last, result, os.getpid()))


def main():
    expect_shim = "--expect-shim" in sys.argv
    failures = []
    held = torch.ones(1 << 20, device="cuda")  # the parent holds CUDA memory when it forks
    parent_before = shim_stats.read()

    # DataLoader workers (fork).
    loader = DataLoader(Numbers(), batch_size=32, num_workers=2, shuffle=False)
    total = torch.zeros((), device="cuda")
    worker_views = {}
    for values, views in loader:
        total += values.to("cuda").sum()
        for mode, chains, live, served, pid in views.tolist():
            worker_views[pid] = (mode, chains, live, served)
    expected_total = float(sum(range(256)) * 64)
    if float(total.item()) != expected_total:
        failures.append(f"DataLoader batches summed to {float(total.item())}, expected {expected_total}")
    if len(worker_views) != 2:
        failures.append(f"{len(worker_views)} worker processes seen, expected 2")
    for pid, (mode, chains, live, served) in worker_views.items():
        print(f"FORK worker pid={pid} shim_mode={mode} chains={chains} live={live} served={served}", flush=True)
        if expect_shim and (mode != 1 or chains != 0 or live != 0 or served != 0):
            failures.append(f"worker {pid} did not start clean with the shim active: mode={mode} chains={chains} "
                            f"live={live} served={served}")

    # A spawned child that uses CUDA.
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=spawn_child, args=(queue, 7))
    proc.start()
    first, last, result, child_pid = queue.get(timeout=300)
    proc.join(120)
    mine = cuda_work(7)
    print(f"SPAWN child pid={child_pid} result={result!r} parent={mine!r} first={first} last={last}", flush=True)
    if proc.exitcode != 0:
        failures.append(f"spawn child exit code {proc.exitcode}")
    if not math.isclose(result, mine, rel_tol=1e-6):
        failures.append(f"spawn child's result {result!r} differs from the parent's {mine!r}")
    if expect_shim:
        if first is None or last is None:
            failures.append("the spawn child has no shim (LD_PRELOAD not inherited?)")
        else:
            if first["chain_allocations"] != 0 or first["chains"] != 0:
                failures.append(f"the spawn child did not start from zero: {first}")
            if last["mode"] != 1 or last["chain_allocations"] < 1:
                failures.append(f"the spawn child's chain served nothing: {last}")
        parent_after = shim_stats.read()
        if parent_before is None or parent_before["chain_allocations"] < 1:
            failures.append("the parent's chain served nothing (is the shim loaded?)")
        if parent_after is not None and (parent_after["double_frees"] or parent_after["failed_allocations"]):
            failures.append(f"parent: {parent_after['double_frees']} double frees, "
                            f"{parent_after['failed_allocations']} failed allocations")
    del held
    if failures:
        print("FAIL fork-spawn: " + "; ".join(failures), flush=True)
        sys.exit(1)
    print("PASS fork-spawn", flush=True)


if __name__ == "__main__":
    main()
