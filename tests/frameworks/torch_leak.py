"""PyTorch, caching allocator off, leaking on purpose for the post-mortem check:
leaky_cache keeps eight 64 MiB tensors and the program ends with os._exit, which
skips the interpreter's teardown, so they are never freed. transient() allocates
and frees sixteen-MiB tensors (not a leak). Prints "LEAKED <bytes> PID <pid>" (the
pid names CPython's perf map under `python -X perf`)."""
import os

import torch

assert os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1", "run with PYTORCH_NO_CUDA_MEMORY_CACHING=1"
kept = []


def transient():
    for _ in range(20):
        t = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
        del t


def leaky_cache():
    for _ in range(8):
        kept.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))


transient()
leaky_cache()
torch.cuda.synchronize()
print("LEAKED", sum(t.numel() for t in kept), "PID", os.getpid(), flush=True)
os._exit(0)
