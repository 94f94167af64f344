"""The workload of FIELD_NOTES §2: an 8-layer MLP, 2048 wide, AdamW, PyTorch.

Prints ms/step for each batch size. Run it three ways, side by side in one job:
  python3 pytorch_mlp.py                                   # PyTorch's caching allocator
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 pytorch_mlp.py  # every allocation a cudaMalloc/cudaFree
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 gpumem-run -- python3 pytorch_mlp.py  # those through gpumem
"""
import argparse
import os
import time

import torch


def make_model(width: int, depth: int) -> torch.nn.Module:
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*layers).cuda()


def run(batch: int, steps: int, warmup: int, width: int, depth: int) -> tuple[float, float]:
    torch.manual_seed(0)
    model = make_model(width, depth)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    loss = None
    for i in range(warmup + steps):
        if i == warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / steps
    return ms, float(loss.item())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--label", default=os.environ.get("MLP_LABEL", "run"))
    a = ap.parse_args()
    caching = os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") not in ("1", "true", "True")
    for b in (int(s) for s in a.batches.split(",")):
        if caching:
            torch.cuda.reset_peak_memory_stats()
        ms, loss = run(b, a.steps, a.warmup, a.width, a.depth)
        memory = ""
        if caching:  # PyTorch's own peaks; with its cache off gpumem's report has them
            memory = (f" max_reserved={torch.cuda.max_memory_reserved()}"
                      f" max_allocated={torch.cuda.max_memory_allocated()}")
            torch.cuda.empty_cache()
        print(f"mlp label={a.label} batch={b} ms_per_step={ms:.3f} final_loss={loss:.6f}{memory}", flush=True)


if __name__ == "__main__":
    main()
