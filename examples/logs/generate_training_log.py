#!/usr/bin/env python3
"""Writes training.csv: a deterministic, training-loop-shaped gpumem allocation log.

Story (what gpumem-report should find):
  * setup: 8 layers of weights (8 MiB each) and AdamW state (2 x 8 MiB per layer);
  * 12 steps of ~250 ms: a data-loader thread allocates the input batch on its own
    stream, the main thread allocates activations forward, gradients backward,
    a 32 MiB optimizer workspace, then frees them;
  * step 4 allocates a 2 MiB metrics buffer that is never freed (the leak);
  * step 9 asks for a 96 GiB workspace and gets CUDA_ERROR_OUT_OF_MEMORY;
  * teardown frees weights and optimizer state.
Only a development aid: the tools never run Python. Re-run to regenerate; the
output is byte-for-byte stable. Prints the expected peak and leak to stdout.
"""
import random

MiB = 1 << 20
rng = random.Random(7)
MAIN, LOADER = 140245, 140251
LEGACY, COMPUTE, COPY = "0x1", "0x5603a0c0", "0x5603b100"
t_ns = 1763733727_000_000_000  # 2025-11-21 14:02:07 UTC
clock0 = (14 * 3600 + 2 * 60 + 7) * 10**9

free_lists, next_addr, live = {}, 0x7F3A40000000, {}
rows, peak, cur = [], 0, 0


def tick(lo_us, hi_us):
    global t_ns
    t_ns += rng.randint(lo_us, hi_us) * 1000


def row(thread, action, ptr, size, stream, entry, result, dur):
    tod = (clock0 + t_ns - 1763733727_000_000_000) // 1000
    s, us = divmod(tod, 10**6)
    time = f"{s // 3600:02}:{s // 60 % 60:02}:{s % 60:02}.{us:06}"
    rows.append(f"{thread},{time},{action},{ptr},{size},{stream},0,{entry},{t_ns},{dur},{result}")


def alloc(size, thread=MAIN, stream=LEGACY, entry="cudaMalloc"):
    global next_addr, cur, peak
    tick(2, 40)
    lst = free_lists.setdefault(size, [])
    if lst:
        p = lst.pop()
    else:
        p = next_addr
        next_addr += (size + 0x1FFFFF) & ~0x1FFFFF
    live[p] = size
    cur += size
    peak = max(peak, cur)
    row(thread, "allocate", f"0x{p:x}", size, stream, entry, "CUDA_SUCCESS", rng.randint(300, 900))
    return p


def free(p, thread=MAIN, stream=LEGACY, entry="cudaFree"):
    global cur
    tick(2, 40)
    size = live.pop(p)
    cur -= size
    free_lists.setdefault(size, []).append(p)
    row(thread, "free", f"0x{p:x}", size, stream, entry, "CUDA_SUCCESS", rng.randint(80, 400))


def fail(size, thread=MAIN, stream=COMPUTE, entry="cudaMallocAsync"):
    tick(2, 40)
    row(thread, "allocate failure", "(nil)", size, stream, entry, "CUDA_ERROR_OUT_OF_MEMORY", rng.randint(1500, 2500))


weights = [alloc(8 * MiB) for _ in range(8)]
state = [alloc(8 * MiB) for _ in range(16)]
leak = None
for step in range(12):
    tick(20_000, 40_000)
    batch = alloc(6 * MiB, LOADER, COPY, "cudaMallocAsync")
    acts = []
    for layer in range(8):
        tick(1_000, 3_000)
        acts.append(alloc(12 * MiB, stream=COMPUTE, entry="cudaMallocAsync"))
    logits = alloc(3 * MiB + 512 * 1024, stream=COMPUTE, entry="cudaMallocAsync")
    if step == 4:
        leak = alloc(2 * MiB, entry="cudaMalloc")
    grads = []
    for layer in reversed(range(8)):
        tick(1_500, 4_000)
        grads.append(alloc(8 * MiB, stream=COMPUTE, entry="cudaMallocAsync"))
        free(acts.pop(), stream=COMPUTE, entry="cudaFreeAsync")
    free(logits, stream=COMPUTE, entry="cudaFreeAsync")
    if step == 9:
        fail(96 << 30)
    ws = alloc(32 * MiB, stream=COMPUTE, entry="cudaMallocAsync")
    for _ in range(4):
        tmp = alloc(rng.choice([256, 4096, 65536, 1 << 18]), stream=COMPUTE, entry="cudaMallocAsync")
        free(tmp, stream=COMPUTE, entry="cudaFreeAsync")
    free(ws, stream=COMPUTE, entry="cudaFreeAsync")
    for g in grads:
        free(g, stream=COMPUTE, entry="cudaFreeAsync")
    free(batch, LOADER, COPY, "cudaFreeAsync")
    tick(150_000, 180_000)
for p in state + weights:
    free(p)

with open("training.csv", "w") as f:
    f.write("Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result\n")
    f.write("\n".join(rows) + "\n")
print(f"events={len(rows)} peak={peak} live_at_end={cur} leak=0x{leak:x}")
