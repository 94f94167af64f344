"""torch.multiprocessing: many CUDA tensors both ways between two processes (CUDA IPC).

    python3 torch_ipc_many_check.py     # with and without gpumem; PyTorch's cache on or off

1. The producer (this process) sends 24 tensors through a pipe: four dtypes, 1 to
   16 M elements, some of them views at an offset inside a larger storage. The
   consumer (a spawned process) checks each against values it computes itself.
2. While the consumer holds them, the producer drops its references, empties
   PyTorch's cache (the segments go back through cudaFree) and allocates and fills
   twice as much again. The consumer's tensors must keep their values, and the
   producer's new tensors must keep theirs once the consumer has written into what it
   holds (no two live tensors share memory).
3. The other way: the consumer sends 12 tensors of its own; the producer checks them
   and writes its answer into them in place, which the consumer then reads.
4. Through a torch.multiprocessing Queue, whose feeder thread (a thread that never
   used CUDA) pickles each tensor: 8 more, each dropped by the producer at once, as
   PyTorch's own tests send them.

With PYTORCH_NO_CUDA_MEMORY_CACHING=1, PyTorch itself refuses to share a CUDA tensor
(its uncached allocator keeps no segment to name); the check then prints the refusal
("refused: ..."), which must be the same with and without gpumem.
Prints "PASS torch-ipc-many" or "FAIL torch-ipc-many: why", or "REFUSED torch-ipc-many: message".
"""
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch
import torch.multiprocessing as mp

DTYPES = [torch.float32, torch.int64, torch.bfloat16, torch.uint8]
COUNTS = [1, 1000, 4097, 1 << 18, (1 << 20) + 3, 1 << 24]


def values(i, n, dtype, seed, device="cuda"):
    """Tensor i's values: exact in every dtype (small integers)."""
    x = (torch.arange(n, device=device, dtype=torch.int64) * 7 + i * 13 + seed) % 251
    return x.to(dtype)


def make(i, n, dtype, seed):
    """Tensor i; every third one a view at an offset inside a larger storage."""
    if i % 3 == 1:
        off = 1000 + i
        base = torch.zeros(n + 2 * off, device="cuda", dtype=dtype)
        base[off:off + n] = values(i, n, dtype, seed)
        return base[off:off + n]
    return values(i, n, dtype, seed)


def receive(conn):
    if not conn.poll(120):
        raise TimeoutError("no message from the other process in 120 s")
    return conn.recv()


def specs(count):
    return [(i, COUNTS[i % len(COUNTS)], DTYPES[i % len(DTYPES)]) for i in range(count)]


def consumer(conn, queue):
    try:
        if not conn.poll(120):
            return
        held = conn.recv()  # rebuilt from the producer's IPC handles
        if isinstance(held, str):
            return
        bad = [i for (i, n, d), t in zip(specs(len(held)), held) if not torch.equal(t, values(i, n, d, 1))]
        conn.send(("received", bad))
        assert receive(conn) == "churned"
        torch.cuda.synchronize()
        bad = [i for (i, n, d), t in zip(specs(len(held)), held) if not torch.equal(t, values(i, n, d, 1))]
        for t in held:
            t.fill_(99)  # must not reach the producer's new tensors
        torch.cuda.synchronize()
        conn.send(("held", bad))
        # The other way: tensors of the consumer's own.
        mine = [make(i, n, d, 2) for i, n, d in specs(12)]
        torch.cuda.synchronize()
        conn.send(mine)
        assert receive(conn) == "answered"
        bad = [i for (i, n, d), t in zip(specs(12), mine) if not torch.equal(t, values(i, n, d, 3))]
        conn.send(("answer", bad))
        assert receive(conn) == "queued"
        got = [queue.get(timeout=120) for _ in range(8)]
        bad = [i for (i, n, d), t in zip(specs(8), got) if not torch.equal(t, values(i, n, d, 6))]
        conn.send(("queue", bad))
        del got
        assert receive(conn) == "done"
        del held, mine
    except Exception as e:  # reported, not raised: the producer waits for a message
        conn.send(("error", repr(e)))


def main():
    ctx = mp.get_context("spawn")
    conn, theirs_end = ctx.Pipe()  # a send pickles at once: a refusal raises here
    queue = ctx.Queue()
    proc = ctx.Process(target=consumer, args=(theirs_end, queue))
    proc.start()
    failures = []
    sent = [make(i, n, d, 1) for i, n, d in specs(24)]
    torch.cuda.synchronize()
    try:
        conn.send(sent)
    except RuntimeError as e:
        conn.send("none")
        proc.join(60)
        print(f"REFUSED torch-ipc-many: {e}", flush=True)
        return
    state, bad = receive(conn)
    if state != "received" or bad:
        failures.append(f"consumer saw other values in tensors {bad} ({state})")
    # While the consumer holds them: drop, empty the cache, allocate and fill again.
    del sent
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    fresh = [make(i, n, d, 5) for i, n, d in specs(48)]
    torch.cuda.synchronize()
    conn.send("churned")
    state, bad = receive(conn)
    if state != "held" or bad:
        failures.append(f"consumer's held tensors changed: {bad} ({state})")
    bad = [i for (i, n, d), t in zip(specs(48), fresh) if not torch.equal(t, values(i, n, d, 5))]
    if bad:
        failures.append(f"producer's new tensors {bad} were overwritten by the consumer")
    # The other way.
    theirs = receive(conn)
    if isinstance(theirs, tuple):
        failures.append(f"consumer: {theirs}")
    else:
        bad = [i for (i, n, d), t in zip(specs(12), theirs) if not torch.equal(t, values(i, n, d, 2))]
        if bad:
            failures.append(f"producer saw other values in the consumer's tensors {bad}")
        for (i, n, d), t in zip(specs(12), theirs):
            t.copy_(values(i, n, d, 3))
        torch.cuda.synchronize()
        del theirs
        conn.send("answered")
        state, bad = receive(conn)
        if state != "answer" or bad:
            failures.append(f"consumer did not read the producer's answer in tensors {bad} ({state})")
    if not failures:
        for i, n, d in specs(8):
            t = make(i, n, d, 6)
            torch.cuda.synchronize()
            queue.put(t)
            del t
        conn.send("queued")
        state, bad = receive(conn)
        if state != "queue" or bad:
            failures.append(f"tensors sent through a queue arrived other than sent: {bad} ({state})")
    conn.send("done")
    proc.join(120)
    if proc.exitcode != 0:
        failures.append(f"consumer exit code {proc.exitcode}")
    print(f"TORCH-IPC-MANY cache={'off' if os.environ.get('PYTORCH_NO_CUDA_MEMORY_CACHING') == '1' else 'on'} "
          f"sent=24+8 received=12 churned=48", flush=True)
    if failures:
        print("FAIL torch-ipc-many: " + "; ".join(failures), flush=True)
        sys.exit(1)
    print("PASS torch-ipc-many", flush=True)


if __name__ == "__main__":
    main()
