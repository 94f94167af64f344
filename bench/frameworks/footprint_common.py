"""What the footprint workloads (footprint_transformer.py, footprint_decoder.py,
footprint_giveback.py) share: step timing with CUDA events, gpumem's counters when
the shim serves the process, and the one JSON line a workload prints at the end.
Not a program of its own.
"""
import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

# gpumem's counters: its Python module where importable (installed, or the copy
# footprint_run.py puts on PYTHONPATH), else the ctypes reader the framework checks
# use. Without either, or without the shim, the workloads run the same and print no
# counters.
shim_stats = None
try:
    import gpumem
except ImportError:  # also the repository's python/ alone, which lacks the generated field list
    gpumem = None
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "frameworks"))
    try:
        import shim_stats
    except ImportError:
        pass


def shim_counters() -> dict | None:
    """The shim's counters (struct gpumem_shim_stats) while it serves this process's
    allocations; None without the shim, or before the process's first CUDA call."""
    if gpumem is not None:
        return gpumem.stats() if gpumem.active() else None
    if shim_stats is None:
        return None
    current = shim_stats.read()
    return current if current is not None and current["mode"] == 1 else None


class ShimWatch:
    """The largest byte counters seen at the moments sample() is called (step
    boundaries). gpumem's exit report has the exact peaks; these say which phase
    (training, generation) reached them."""

    FIELDS = ("live_bytes", "reserved_bytes", "pending_free_bytes")

    def __init__(self) -> None:
        self.last = None
        self.largest = {}

    def sample(self) -> None:
        current = shim_counters()
        if current is None:
            return
        self.last = current
        for f in self.FIELDS:
            self.largest[f] = max(self.largest.get(f, 0), current[f])


class StepTimer:
    """CUDA events at every step boundary, read once after the loop: timing adds no
    host synchronization to the steps themselves."""

    def __init__(self, steps: int) -> None:
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        self.window = [0.0, 0.0]  # time.time() at the first mark and after the last step

    def mark(self, step: int) -> None:
        if step == 0:
            self.window[0] = time.time()
        self.events[step].record()

    def finish(self) -> list[float]:
        """Ends the last step, waits for the device, returns each step's milliseconds."""
        self.events[-1].record()
        torch.cuda.synchronize()
        self.window[1] = time.time()
        return [a.elapsed_time(b) for a, b in itertools.pairwise(self.events)]


def add_common_arguments(ap: argparse.ArgumentParser, steps: int) -> None:
    ap.add_argument("--steps", type=int, default=steps, help="training steps (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=5, help="first steps left out of the timing (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="shapes, data and weights (default %(default)s)")


def check_common_arguments(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    if a.warmup < 0 or a.steps <= a.warmup:
        ap.error("need 0 <= --warmup < --steps")


def emit(workload: str, step_ms: list[float], warmup: int, final_loss: float, watch: ShimWatch, **extra) -> None:
    """Prints the workload's one JSON line (footprint_run.py reads the last line of stdout)."""
    timed = step_ms[warmup:]
    line = {
        "workload": workload,
        "ms_per_step_median": statistics.median(timed),
        "ms_per_step_mean": statistics.fmean(timed),
        "steps": len(step_ms),
        "timed_steps": len(timed),
        "final_loss": final_loss,
        **extra,
        # Meaningful with PyTorch's caching allocator only (with PYTORCH_NO_CUDA_MEMORY_CACHING=1
        # gpumem's report has the peaks).
        "torch_max_reserved": torch.cuda.max_memory_reserved(),
        "torch_max_allocated": torch.cuda.max_memory_allocated(),
        "torch_version": torch.__version__,
    }
    if watch.last is not None:
        line["gpumem"] = watch.last
        line["gpumem_largest_sampled"] = watch.largest
    print(json.dumps(line), flush=True)
