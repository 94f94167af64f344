"""PyTorch CUDA graphs: the graph's results, and the memory it uses never handed
to another tensor while the graph lives.

A small MLP is captured into a graph (torch.cuda.graph) and replayed 40 times on
new inputs. Between replays the program allocates and frees other tensors, and
keeps the last 16 of them ("canaries", each filled with its own value): if memory
the graph writes to had gone back to the allocator, a replay would land in one
of them, or the graph's output would differ from the same model run eagerly.

With PyTorch's caching allocator (the default) the graph's memory comes from the
graph's private pool. With PYTORCH_NO_CUDA_MEMORY_CACHING=1 PyTorch allocates
each tensor with cudaMalloc on the capturing thread, which CUDA refuses during a
capture: the capture fails with an error, as it must under gpumem too.

Prints "TORCH-GRAPH ok checksum=<value> ..." or "TORCH-GRAPH refused: <error>";
with the expected outcome as its argument ("refused", or a checksum) exits 1
unless the outcome is that one, or a replay disagreed, or a canary was damaged."""
import sys

import torch


def main():
    expected = sys.argv[1] if len(sys.argv) > 1 else None
    torch.manual_seed(0)
    n, batch = 1024, 256
    model = torch.nn.Sequential(*[torch.nn.Linear(n, n) for _ in range(4)]).cuda()
    static_x = torch.randn(batch, n, device="cuda")

    def forward(x):
        return torch.tanh(model(x)) * 2  # intermediates allocated and dropped inside

    # PyTorch's recipe: warm up on a side stream before capturing.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            forward(static_x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    try:
        with torch.no_grad(), torch.cuda.graph(graph):
            static_y = forward(static_x)
    except RuntimeError as e:
        print(f"TORCH-GRAPH refused: {str(e).splitlines()[0]}")
        torch.cuda.synchronize()
        return 0 if expected in (None, "refused") else 1

    gen = torch.Generator(device="cuda").manual_seed(1)
    canaries = []
    total = 0.0
    mismatches = damaged = 0
    with torch.no_grad():
        for i in range(40):
            x = torch.randn(batch, n, device="cuda", generator=gen)
            static_x.copy_(x)
            junk = [torch.full((batch, n), -1.0, device="cuda") for _ in range(6)]
            canaries.append((torch.full((batch, n), float(i), device="cuda"), float(i)))
            del junk
            canaries = canaries[-16:]
            graph.replay()
            eager = forward(x)
            torch.cuda.synchronize()
            if not torch.allclose(static_y, eager, rtol=1e-4, atol=1e-5):
                mismatches += 1
            total += float(static_y.double().abs().sum())
            damaged += sum(1 for c, v in canaries if not bool((c == v).all()))
    print(f"TORCH-GRAPH ok checksum={total!r} replays=40 mismatches={mismatches} damaged_canaries={damaged}")
    if mismatches or damaged:
        return 1
    if expected is not None and expected != repr(total):
        print(f"TORCH-GRAPH expected {expected}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
