"""Numba CUDA IPC: a device array's handle sent to a spawned process (no @cuda.jit
kernel: device arrays and copies only, so it runs with the machine's NumPy).

    python3 numba_ipc_check.py refused   # under gpumem's default pool
    python3 numba_ipc_check.py shared    # without gpumem, or under GPUMEM_RESOURCE=cuda

`refused` (run with gpumem-run --pool-size 1GiB, so the array is a block inside a
pool slab): get_ipc_handle() fails with CUDA_ERROR_NOT_SUPPORTED (gpumem's message
names the fix) and the consumer receives nothing. `shared`: the consumer opens the handle, sees exactly the producer's values,
writes its answer into the same memory, and the producer reads it back.
"""
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import multiprocessing

import numpy

N = 1 << 20


def expected():
    return numpy.arange(N, dtype=numpy.float64) * 3.0 + 1.0


def consumer(conn):
    from numba import cuda
    if not conn.poll(60):
        conn.send(("nothing", None))
        return
    handle = conn.recv()
    if handle is None:
        conn.send(("nothing", None))
        return
    with handle as arr:  # opens the IPC handle in this process
        host = arr.copy_to_host()
        same = bool(numpy.array_equal(host, expected()))
        arr.copy_to_device(-host)
        cuda.synchronize()
    conn.send(("received", same))


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "shared"
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=consumer, args=(child,))
    proc.start()

    from numba import cuda
    import shim_stats
    warm = cuda.device_array(1 << 18, dtype=numpy.float32)  # the array below does not start its slab
    d = cuda.to_device(expected())
    error = None
    handle = None
    try:
        handle = d.get_ipc_handle()
    except Exception as e:  # numba's CudaAPIError
        error = f"{type(e).__name__}: {e}"
    parent.send(handle)
    state, same = parent.recv()
    proc.join(60)
    stats = shim_stats.read()
    refused = stats["ipc_refused"] if stats else 0
    print(f"NUMBA-IPC mode={mode} handle_error={error!r} consumer={state} consumer_saw_values={same} "
          f"ipc_refused={refused}", flush=True)

    failures = []
    if mode == "refused":
        if error is None or "NOT_SUPPORTED" not in error.upper().replace(" ", "_"):
            failures.append(f"get_ipc_handle should fail with CUDA_ERROR_NOT_SUPPORTED, got {error!r}")
        if state != "nothing":
            failures.append("the consumer received a handle")
        if refused < 1:
            failures.append("gpumem did not count a refused IPC handle (is the shim loaded?)")
        if not numpy.array_equal(d.copy_to_host(), expected()):
            failures.append("the producer's array changed")
    else:
        if error is not None:
            failures.append(f"get_ipc_handle failed: {error}")
        if state != "received" or not same:
            failures.append(f"the consumer did not see exactly the producer's values ({state}, {same})")
        if not numpy.array_equal(d.copy_to_host(), -expected()):
            failures.append("the consumer's write did not reach the producer's array")
    del warm
    if proc.exitcode != 0:
        failures.append(f"consumer exit code {proc.exitcode}")
    if failures:
        print(f"FAIL numba-ipc-{mode}: " + "; ".join(failures), flush=True)
        sys.exit(1)
    print(f"PASS numba-ipc-{mode}", flush=True)


if __name__ == "__main__":
    main()
