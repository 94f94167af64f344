"""A second PyTorch workload, with shapes that change every step: a small transformer
(4 layers, d_model 1024, bf16 autocast, AdamW) trained on batches whose sequence length
is drawn anew each step (64..2048 tokens, fixed seed). Every activation, gradient and
temporary changes size from step to step — the case where a caching allocator splits,
fragments and grows, unlike the MLP of pytorch_mlp.py, whose shapes repeat exactly.

Prints one line per batch size (sequences per batch): ms/step as the median over the
timed steps (each step timed with CUDA events, no host synchronization inside the loop),
the mean, the final loss, and PyTorch's own peak reserved / allocated memory when its
caching allocator is on. Run it the same ways as pytorch_mlp.py, side by side in one job:
  python3 pytorch_varlen.py                                   # PyTorch's caching allocator
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 pytorch_varlen.py  # every tensor a cudaMalloc/cudaFree
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 gpumem-run -- python3 pytorch_varlen.py  # those through gpumem
"""
import argparse
import os
import random
import statistics

import torch


class TinyTransformer(torch.nn.Module):
    def __init__(self, vocab: int, d_model: int, layers: int, heads: int, ff: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d_model)
        layer = torch.nn.TransformerEncoderLayer(
            d_model, heads, ff, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


def caching_enabled() -> bool:
    return os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") not in ("1", "true", "True")


def run(a: argparse.Namespace, batch: int) -> dict:
    torch.manual_seed(a.seed)
    lengths = random.Random(a.seed)  # the same sequence lengths in every configuration
    model = TinyTransformer(a.vocab, a.d_model, a.layers, a.heads, a.ff).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(a.seed)
    if caching_enabled():
        torch.cuda.reset_peak_memory_stats()
    marks = []
    loss = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            torch.cuda.synchronize()
        if step >= a.warmup:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            marks.append(ev)
        seq = lengths.randint(a.min_len, a.max_len)
        tokens = torch.randint(0, a.vocab, (batch, seq + 1), device="cuda", generator=gen)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        loss = loss_fn(logits.float().reshape(-1, a.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
    end = torch.cuda.Event(enable_timing=True)
    end.record()
    marks.append(end)
    torch.cuda.synchronize()
    steps_ms = [marks[i].elapsed_time(marks[i + 1]) for i in range(len(marks) - 1)]
    out = {
        "ms_per_step": statistics.median(steps_ms),
        "mean_ms_per_step": sum(steps_ms) / len(steps_ms),
        "final_loss": float(loss.item()),
    }
    if caching_enabled():
        out["max_reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20
        out["max_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
    del model, opt
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="8,32", help="sequences per batch, comma-separated")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--min-len", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=2048)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ff", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label", default=os.environ.get("VARLEN_LABEL", "run"))
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0 or not 1 <= a.min_len <= a.max_len:
        ap.error("need --steps >= 1, --warmup >= 0 and 1 <= --min-len <= --max-len")
    for b in (int(s) for s in a.batches.split(",")):
        r = run(a, b)
        extra = ""
        if "max_reserved_mib" in r:
            extra = f" max_reserved_mib={r['max_reserved_mib']:.0f} max_allocated_mib={r['max_allocated_mib']:.0f}"
        print(f"varlen label={a.label} batch={b} ms_per_step={r['ms_per_step']:.3f} "
              f"mean_ms_per_step={r['mean_ms_per_step']:.3f} final_loss={r['final_loss']:.6f}{extra} "
              f"steps={a.steps}", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
