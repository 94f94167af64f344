"""PyTorch, caching allocator off, running out of memory on purpose for the
post-mortem check (under gpumem-run --limit): grow_until_oom appends 256 MiB
tensors until an allocation fails. With its cache off PyTorch reports the failed
cudaMalloc as a RuntimeError (torch.cuda.OutOfMemoryError or a CUDA error, by
version), so any RuntimeError ends the growth. Prints "OOM after <n> tensors
(<exception type>) PID <pid>"; exits 1 if nothing failed within 4096 tensors."""
import os
import sys

import torch

assert os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1", "run with PYTORCH_NO_CUDA_MEMORY_CACHING=1"
held = []


def grow_until_oom():
    for _ in range(4096):
        held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))


try:
    grow_until_oom()
except RuntimeError as e:
    first = str(e).splitlines()[0] if str(e) else ""
    print(f"OOM after {len(held)} tensors ({type(e).__name__}: {first}) PID {os.getpid()}", flush=True)
    sys.exit(0)
print(f"no out-of-memory error after {len(held)} tensors PID {os.getpid()}", flush=True)
sys.exit(1)
