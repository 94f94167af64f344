"""PyTorch DistributedDataParallel over NCCL, one process per GPU, started by torchrun:

    torchrun --nproc-per-node 2 ddp_train.py [--expect HEX0,HEX1] [--expect-shim]

A few deterministic training steps (gradients all-reduced by NCCL), then an explicit
all-reduce whose sum is known. Each rank prints

    DDP rank=R device=D cache=on|off loss=<float.hex> (<decimal>) served=N chains=C

and rank 0 prints every rank's final loss on one line: `DDP losses=HEX0,HEX1`.
--expect: the losses of a run without gpumem; every rank asserts its own equals it
bit for bit. --expect-shim: the rank checks, through libgpumem_shim.so's counters,
that its device's chain served its allocations and that no chain was built for any
other device (a rank touches its own GPU only).
"""
import argparse
import os
import sys

# NVLink multicast stays off in every process this starts (shared GPUs can be put
# out of service by it); the caller sets these too, this only keeps them set.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import shim_stats


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--expect", help="comma-separated float.hex losses of a reference run, by rank")
    parser.add_argument("--expect-shim", action="store_true")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    cache = "off" if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1" else "on"
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    before = shim_stats.read()
    dist.init_process_group("nccl", device_id=device)

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts them)
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 16)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    gen = torch.Generator(device="cpu").manual_seed(1000 + rank)  # each rank its own shard
    x = torch.randn(args.steps, 128, 512, generator=gen).to(device)
    y = torch.randint(0, 16, (args.steps, 128), generator=gen).to(device)
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(ddp(x[step]), y[step])
        loss.backward()  # NCCL all-reduce of the gradients
        opt.step()
    value = float(loss.item())

    # An explicit all-reduce with a known result.
    t = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(t)
    expected_sum = float(world * (world + 1) // 2)
    assert bool((t == expected_sum).all()), f"all-reduce gave {t[0].item()}, expected {expected_sum}"

    losses = torch.zeros(world, dtype=torch.float64, device=device)
    losses[rank] = value
    dist.all_reduce(losses)
    by_rank = [float(v) for v in losses.tolist()]

    after = shim_stats.read()
    served = -1 if after is None else after["chain_allocations"] - before["chain_allocations"]
    chains = -1 if after is None else after["chains"]
    print(f"DDP rank={rank} device={local_rank} cache={cache} loss={value.hex()} ({value:.9f}) "
          f"served={served} chains={chains}", flush=True)
    if rank == 0:
        print("DDP losses=" + ",".join(v.hex() for v in by_rank), flush=True)

    failures = []
    if args.expect:
        want = [float.fromhex(v) for v in args.expect.split(",")]
        if len(want) != world:
            failures.append(f"--expect has {len(want)} losses for {world} ranks")
        elif value != want[rank]:
            failures.append(f"loss {value.hex()} differs from the reference {want[rank].hex()}")
    if args.expect_shim:
        if after is None:
            failures.append("libgpumem_shim.so is not loaded in this rank")
        else:
            if after["mode"] != 1:
                failures.append(f"shim mode {after['mode']}, expected 1 (active)")
            if served < 1:
                failures.append("the chain served no allocation")
            if chains != 1:
                failures.append(f"{chains} device chains in this rank; expected 1 (its own device)")
            if after["double_frees"] or after["failed_allocations"]:
                failures.append(f"double frees {after['double_frees']}, failed {after['failed_allocations']}")
    dist.barrier()
    dist.destroy_process_group()
    if failures:
        print(f"FAIL ddp rank={rank}: " + "; ".join(failures), flush=True)
        sys.exit(1)
    print(f"PASS ddp rank={rank}", flush=True)


if __name__ == "__main__":
    main()
