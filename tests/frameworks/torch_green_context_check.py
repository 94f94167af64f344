"""PyTorch work in a green context (torch.cuda.green_contexts: half the SMs) on
tensors from the primary context, freed while that work still runs.

Each round allocates x on the primary context (under gpumem: from its pool),
queues matrix products that read x in the green context, drops x at once (with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 that is a cudaFree, which real CUDA makes wait
for the device), then fills a new tensor of x's size on the primary context: the
pool may hand it x's block. If that fill overtook the green context's products,
their result would change. Prints "TORCH-GREEN checksum=<value> rounds=<n>";
with a reference checksum as its argument it exits 1 unless the two are equal.
Exits 0 with "skipped" where PyTorch has no green contexts."""
import contextlib
import sys

import torch


def main():
    try:
        from torch.cuda.green_contexts import GreenContext
    except ImportError as e:
        print(f"TORCH-GREEN skipped: {e}")
        return 0
    expected = float(sys.argv[1]) if len(sys.argv) > 1 else None
    torch.cuda.init()
    sms = torch.cuda.get_device_properties(0).multi_processor_count // 2
    try:
        try:
            ctx = GreenContext.create(num_sms=sms, device_id=0)
        except TypeError:
            ctx = GreenContext.create(sms, 0)
    except Exception as e:  # an older driver, a device without SM partitions
        print(f"TORCH-GREEN skipped: cannot create a green context: {e}")
        return 0
    green_stream = ctx.Stream() if hasattr(ctx, "Stream") else None
    # Newer PyTorch: a stream of the green context; older: the green context made
    # current (its default stream then runs the work).
    enter = contextlib.ExitStack()

    def enter_green():
        if green_stream is not None:
            enter.enter_context(torch.cuda.stream(green_stream))
        else:
            ctx.set_context()

    def leave_green():  # without waiting for the queued work
        if green_stream is not None:
            enter.close()
        else:
            ctx.pop_context()

    def wait_green():
        if green_stream is not None:
            green_stream.synchronize()
        else:
            ctx.set_context()
            torch.cuda.current_stream().synchronize()
            ctx.pop_context()

    n = 2048
    rounds = 20
    gen = torch.Generator(device="cuda").manual_seed(0)
    total = 0.0
    for i in range(rounds):
        x = torch.randn(n, n, device="cuda", generator=gen) / n**0.5
        torch.cuda.current_stream().synchronize()  # x is ready before the green work starts
        enter_green()
        y = x
        for _ in range(12):
            y = y @ x
        leave_green()
        # Back on the primary context's default stream, the products still queued:
        # the free and the new tensor's fill race them unless cudaFree's promise holds.
        del x
        z = torch.full((n, n), float(i + 1), device="cuda")
        wait_green()
        torch.cuda.synchronize()
        total += float(y.double().abs().sum())
        assert float(z.sum()) == (i + 1) * n * n, "the new tensor's own fill was lost"
        del y, z
    print(f"TORCH-GREEN checksum={total!r} rounds={rounds} green_stream={green_stream is not None}")
    if expected is not None and total != expected:
        print(f"TORCH-GREEN FAIL: checksum {total!r}, without gpumem {expected!r}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
