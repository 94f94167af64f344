"""Replays the repeating step of a training run's allocation log many times, through the
CUDA runtime, so that gpumem's exit report shows what a long run of that step costs its
pool: pages moved, barriers, the footprint against live memory.

The step is found in the log: the longest run of events whose sizes and actions the
next run repeats, every free in it freeing memory of that step or the one before (a
run of a few training steps holds each step whole at least twice).
Everything before it is replayed once (the model, the optimizer's state); then the step
--steps times, with a cudaDeviceSynchronize every --sync-every steps (as
pytorch_mlp.py's blocks do). Device allocations only (cudaMalloc, cuMemAlloc and their
frees); each is replayed as cudaMalloc / cudaFree, what PyTorch with its cache off does.

The simulated device runs no work, so the figures to read are the report's counts, not
times. From the repository root, after scripts/test:
  LD_LIBRARY_PATH=build/simdevice build/bin/gpumem-run --report -- \\
      python3 bench/frameworks/replay_steps.py examples/logs/pytorch-mlp.csv --steps 200
"""
import argparse
import csv
import ctypes
import sys

DEVICE = {"cudaMalloc", "cuMemAlloc", "cudaFree", "cuMemFree"}


def read_events(path: str) -> list[tuple[str, int, str]]:
    """(action, size, pointer) of the log's successful device allocations and frees."""
    events = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("Result", "CUDA_SUCCESS") != "CUDA_SUCCESS" or row["Entry"] not in DEVICE:
                continue
            events.append((row["Action"], int(row["Size"] or 0), row["Pointer"]))
    return events


def find_step(ev: list[tuple[str, int, str]], born: list[int]) -> tuple[int, int]:
    """(start, length) of the longest step the log repeats, the latest such."""
    n = len(ev)
    shape = [(a, s if a == "allocate" else 0) for a, s, _ in ev]
    for length in range(n // 2, 7, -1):
        for start in range(n - 2 * length, -1, -1):
            if shape[start:start + length] != shape[start + length:start + 2 * length]:
                continue
            frees_inside = all(start - length <= born[i] < start + length
                               for i in range(start, start + length) if ev[i][0] == "free")
            if frees_inside and any(a == "free" for a, _ in shape[start:start + length]):
                return start, length
    sys.exit("replay_steps: no repeating step in this log")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--sync-every", type=int, default=10, help="steps between synchronizations (0: none)")
    ap.add_argument("--streams", type=int, default=0,
                    help="non-blocking streams to create first, idle, as a program with side streams has "
                         "(NCCL's, a data loader's): safe mode's barriers join them")
    a = ap.parse_args()
    ev = read_events(a.log)
    born = []  # for a free: the index of its allocation (-1 for an unknown pointer)
    live: dict[str, int] = {}
    for i, (action, _, p) in enumerate(ev):
        if action == "allocate":
            live[p] = i
            born.append(i)
        else:
            born.append(live.pop(p, -1))
    start, length = find_step(ev, born)
    print(f"replay_steps: {start} events once, then a step of {length} events {a.steps} times", flush=True)

    rt = ctypes.CDLL("libcudart.so.13")
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    ptr: dict[int, int] = {}  # event index -> the pointer its allocation got
    streams = [ctypes.c_void_p() for _ in range(a.streams)]
    for st in streams:
        if rt.cudaStreamCreateWithFlags(ctypes.byref(st), 1) != 0:  # cudaStreamNonBlocking
            sys.exit("replay_steps: cudaStreamCreateWithFlags failed")

    def replay(i: int, offset: int) -> None:
        action, size, _ = ev[i]
        if action == "allocate":
            p = ctypes.c_void_p()
            if rt.cudaMalloc(ctypes.byref(p), size) != 0:
                sys.exit(f"replay_steps: cudaMalloc({size}) failed at event {i}")
            ptr[i + offset] = p.value
        elif born[i] >= 0 and rt.cudaFree(ctypes.c_void_p(ptr.pop(born[i] + offset))) != 0:
            sys.exit(f"replay_steps: cudaFree failed at event {i}")

    for i in range(start):
        replay(i, 0)
    for k in range(a.steps):
        # Step k's events stand at start + k * length; a free of the step before
        # finds its allocation one length back, as in the log.
        for i in range(start, start + length):
            replay(i, k * length)
        if a.sync_every and (k + 1) % a.sync_every == 0:
            rt.cudaDeviceSynchronize()
    rt.cudaDeviceSynchronize()
    print(f"replay_steps: {a.steps} steps replayed", flush=True)
    try:  # the simulated device counts driver calls: the host's waits, and page maps
        count = ctypes.CDLL("libcuda.so.1").gpumemsim_call_count
        count.argtypes, count.restype = [ctypes.c_char_p], ctypes.c_long
        calls = {e: count(e.encode()) for e in ("cuEventSynchronize", "cuMemMap", "cuMemUnmap")}
        print("replay_steps: driver calls " + ", ".join(f"{e} {c}" for e, c in calls.items()), flush=True)
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    main()
