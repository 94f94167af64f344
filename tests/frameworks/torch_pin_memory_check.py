"""PyTorch data loading with pin_memory=True: worker processes build batches, the
loader's pinning thread copies them into pinned host memory, and each batch goes to
the GPU with a non-blocking copy while the next is pinned. Pinned blocks are freed and
reused all along, their copies possibly still queued.

    python3 torch_pin_memory_check.py [--expect HEX] [--expect-host-chain] [--empty-cache]

Prints `TORCH-PIN checksum=<float.hex>`: a float64 sum over every batch, computed on
the GPU. --expect: the checksum of a run without gpumem (must be equal bit for bit).
--expect-host-chain: gpumem's host chain must have served pinned allocations (run
under gpumem-run --host-pool). --empty-cache: PyTorch's pinned-memory cache emptied
after every batch (torch._C._host_emptyCache), so that most pinned tensors are a
cudaHostAlloc of their own and their frees cudaFreeHost calls.
"""
import argparse
import ctypes
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--expect")
parser.add_argument("--expect-host-chain", action="store_true")
parser.add_argument("--empty-cache", action="store_true")
args = parser.parse_args()

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402


class Batches(Dataset):
    """Deterministic samples of varying shape groups (the collate stacks one shape)."""

    def __len__(self):
        return 2048

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, 257 + (i // 256) * 64, generator=g), i


def host_stats():
    class S(ctypes.Structure):
        _fields_ = [("built", ctypes.c_int), ("pooled", ctypes.c_int)] + [
            (f, ctypes.c_ulonglong)
            for f in ("allocations", "frees", "passthroughs", "live_bytes", "reserved_bytes", "waiting_bytes",
                      "fences", "waits")]
    try:
        fn = ctypes.CDLL(None).gpumem_shim_get_host_stats
    except AttributeError:
        return None
    s = S()
    return {n: getattr(s, n) for n, _ in S._fields_} if fn(ctypes.byref(s)) == 0 else None


def main():
    loader = DataLoader(Batches(), batch_size=32, num_workers=2, pin_memory=True)
    total = torch.zeros((), dtype=torch.float64, device="cuda")
    copy_stream = torch.cuda.Stream()
    for x, idx in loader:
        assert x.is_pinned()
        with torch.cuda.stream(copy_stream):
            d = x.to("cuda", non_blocking=True)
            w = idx.to("cuda", non_blocking=True).to(torch.float64)
        torch.cuda.current_stream().wait_stream(copy_stream)
        d.record_stream(torch.cuda.current_stream())
        total += (d.double().sum(dim=(1, 2)) * (w + 1)).sum()
        del x, d  # the pinned batch goes back while its copy may still be queued
        if args.empty_cache:
            torch._C._host_emptyCache()
    torch.cuda.synchronize()
    checksum = total.item().hex()
    print(f"TORCH-PIN checksum={checksum} ({total.item():.6f})")
    if args.expect and checksum != args.expect:
        sys.exit(f"TORCH-PIN: checksum {checksum} differs from the run without gpumem ({args.expect})")
    if args.expect_host_chain:
        s = host_stats()
        if s is None or not s["built"] or s["allocations"] == 0:
            sys.exit(f"TORCH-PIN: gpumem's host chain served no pinned allocation ({s})")
        print(f"TORCH-PIN host chain: {s['allocations']} allocations, {s['frees']} frees, "
              f"reserved {s['reserved_bytes'] / 2**20:.1f} MiB, fences {s['fences']}, waits {s['waits']}")
    print("PASS torch-pin-memory")


if __name__ == "__main__":
    main()
