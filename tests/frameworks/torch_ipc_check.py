"""torch.multiprocessing: a CUDA tensor sent to a spawned process (CUDA IPC).

    python3 torch_ipc_check.py refused   # under a pool over cudaMalloc slabs
    python3 torch_ipc_check.py shared    # without gpumem, or under GPUMEM_RESOURCE=cuda

PyTorch shares the caching-allocator segment that holds the tensor (one cudaMalloc)
and sends the tensor's offset in it; its cache must be on (with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 PyTorch cannot share CUDA tensors at all).

`refused`: run under gpumem's pool over cudaMalloc slabs, larger than the segment
(gpumem-run --resource cuda-pool --pool-size 1GiB), so the segment is a block inside
a slab whose IPC handle would open the whole slab; gpumem refuses the handle (its
message names the fix), the send fails in the producer with "operation not
supported", and the consumer receives nothing. `shared`: the consumer opens the handle, finds exactly the producer's values
(a view at an offset inside a larger storage) and writes its answer into the same
memory, which the producer then reads.
"""
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch
import torch.multiprocessing as mp

import shim_stats

N = 1 << 20
OFFSET = 12345


def expected():
    return torch.arange(OFFSET, OFFSET + N, dtype=torch.float32) * 0.5


def consumer(conn):
    if not conn.poll(60):
        conn.send(("nothing", None))
        return
    msg = conn.recv()
    if msg == "no tensor":
        conn.send(("nothing", None))
        return
    x = msg  # rebuilt from the producer's IPC handle
    same = bool(torch.equal(x.cpu(), expected()))
    x.mul_(-1.0)
    torch.cuda.synchronize()
    conn.send(("received", same))


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "shared"
    assert os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") != "1", "PyTorch shares CUDA tensors only with its cache on"
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=consumer, args=(child,))
    proc.start()

    warm = torch.ones(1 << 18, device="cuda")  # another segment, live meanwhile
    storage = torch.arange(N + 2 * OFFSET, dtype=torch.float32, device="cuda") * 0.5
    x = storage[OFFSET:OFFSET + N]
    torch.cuda.synchronize()
    error = None
    try:
        parent.send(x)  # pickling asks CUDA for the storage's IPC handle
    except RuntimeError as e:
        error = str(e)
        parent.send("no tensor")
    state, same = parent.recv()
    proc.join(60)
    stats = shim_stats.read()
    refused = stats["ipc_refused"] if stats else 0
    print(f"TORCH-IPC mode={mode} send_error={error!r} consumer={state} consumer_saw_values={same} "
          f"ipc_refused={refused}", flush=True)

    failures = []
    if mode == "refused":
        if error is None or "not supported" not in error:
            failures.append(f"the send should fail with 'operation not supported', got {error!r}")
        if state != "nothing":
            failures.append("the consumer received a tensor")
        if refused < 1:
            failures.append("gpumem did not count a refused IPC handle (is the shim loaded?)")
        if not torch.equal(x.cpu(), expected()):
            failures.append("the producer's tensor changed")
    else:
        if error is not None:
            failures.append(f"the send failed: {error}")
        if state != "received" or not same:
            failures.append(f"the consumer did not see exactly the producer's values ({state}, {same})")
        if not torch.equal(x.cpu(), -expected()):
            failures.append("the consumer's write did not reach the producer's tensor")
        if not torch.equal(storage[:OFFSET].cpu(), torch.arange(OFFSET, dtype=torch.float32) * 0.5):
            failures.append("memory before the view changed")
    del warm
    if proc.exitcode != 0:
        failures.append(f"consumer exit code {proc.exitcode}")
    if failures:
        print(f"FAIL torch-ipc-{mode}: " + "; ".join(failures), flush=True)
        sys.exit(1)
    print(f"PASS torch-ipc-{mode}", flush=True)


if __name__ == "__main__":
    main()
