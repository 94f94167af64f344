"""PyTorch with its caching allocator on and expandable segments
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): the allocator then creates
and maps device memory itself (cuMemCreate, cuMemMap), which no allocation hook
sees. gpumem cannot pool that memory; it must count it, log it and hold it to the
limit.

Checks, under gpumem-run with GPUMEM_LIMIT (--limit BYTES, the same value):
  - a few training steps give exactly the loss of a run without gpumem;
  - the shim saw the memory PyTorch created (passthrough_allocations grew);
  - a tensor that would take the process past the limit raises
    torch.OutOfMemoryError, and the process goes on: a small tensor still works,
    and training continues with the same results.
Without --limit it only prints the loss (the reference run)."""
import argparse
import os

import torch

import shim_stats

parser = argparse.ArgumentParser()
parser.add_argument("--limit", type=int, default=0, help="gpumem's limit in bytes (GPUMEM_LIMIT)")
parser.add_argument("--expected-loss", type=float, default=None)
args = parser.parse_args()
assert "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), \
    "run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"

torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
torch.use_deterministic_algorithms(True, warn_only=True)
before = shim_stats.read()
model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(512, 2048, device="cuda")
y = torch.randint(0, 10, (512,), device="cuda")


def train(steps):
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return float(loss.item())


value = train(5)
print(f"TORCH-EXPANDABLE loss={value:.6f}")
if args.expected_loss is not None:
    assert abs(value - args.expected_loss) <= 1e-6 * max(1.0, abs(args.expected_loss)), (value, args.expected_loss)
if args.limit:
    after = shim_stats.read()
    if after is None:
        raise SystemExit("torch-expandable: libgpumem_shim.so is not loaded")
    made = after["passthrough_allocations"] - before["passthrough_allocations"]
    print(f"torch-expandable: shim saw {made} pass-through allocations "
          f"(PyTorch reserved {torch.cuda.memory_reserved() / 2**20:.0f} MiB)")
    if made < 1:
        raise SystemExit("torch-expandable: the shim saw none of the memory PyTorch created")
    try:
        big = torch.empty(args.limit, dtype=torch.uint8, device="cuda")  # the whole limit, on top of the model
        raise SystemExit(f"torch-expandable: {args.limit} bytes past gpumem's limit were allocated")
    except torch.OutOfMemoryError as e:
        print("torch-expandable: refused as expected:", str(e).splitlines()[0][:160])
    small = torch.ones(1 << 20, device="cuda")
    assert float(small.sum().item()) == float(1 << 20)
    again = train(1)
    print(f"torch-expandable: training goes on, loss {again:.6f}")
print("PASS torch-expandable")
