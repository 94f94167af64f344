"""PyTorch, caching allocator off: a few training steps must be served by gpumem's
chain and give exactly the loss of a run without gpumem (deterministic setup)."""
import os
import sys

import torch

import shim_stats

assert os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1", "run with PYTORCH_NO_CUDA_MEMORY_CACHING=1"
torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
torch.use_deterministic_algorithms(True, warn_only=True)
before = shim_stats.read()
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(256, 1024, device="cuda")
y = torch.randint(0, 10, (256,), device="cuda")
for _ in range(10):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
value = float(loss.item())
free, total = torch.cuda.mem_get_info()
assert 0 < free <= total, (free, total)
print(f"TORCH loss={value:.6f} mem_get_info free={free} total={total}")
if len(sys.argv) > 1:  # expected loss from a run without the shim
    expected = float(sys.argv[1])
    assert abs(value - expected) <= 1e-6 * max(1.0, abs(expected)), (value, expected)
    shim_stats.require_served("pytorch", before, shim_stats.read(), at_least=50)
print("PASS pytorch")
