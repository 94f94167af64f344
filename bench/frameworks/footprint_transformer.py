"""Footprint workload 1: a transformer trained on batches whose sequence length changes
every step, the case where a caching allocator splits and grows its blocks.

torch.nn.TransformerEncoder (6 layers, d_model 512, 8 heads, feed-forward 2048, causal
mask) between a token embedding and a linear head over a vocabulary of 8000; batch 32,
sequence length drawn from 32..512 each step (random.Random(seed): the same lengths in
every configuration); cross-entropy, AdamW, fp32, 60 steps. Each step is timed with
CUDA events on the GPU timeline, read after the loop; the first --warmup steps are left
out. Prints one JSON line: ms/step (median, mean), the final loss, PyTorch's peak
reserved/allocated bytes (meaningful with its caching allocator only) and, under
gpumem, the shim's counters.

footprint_run.py runs it under each allocator configuration and measures the device
memory it holds from outside; by hand:
  python3 footprint_transformer.py
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 gpumem-run --report -- python3 footprint_transformer.py
"""
import argparse
import random

import torch

from footprint_common import ShimWatch, StepTimer, add_common_arguments, check_common_arguments, emit


class Model(torch.nn.Module):
    def __init__(self, vocab: int, d_model: int, layers: int, heads: int, ff: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d_model)
        layer = torch.nn.TransformerEncoderLayer(d_model, heads, ff, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # A new mask each step, of the step's size: one more allocation that changes shape.
        mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        return self.head(self.encoder(self.embed(tokens), mask=mask, is_causal=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(ap, steps=60)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--min-len", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--ff", type=int, default=2048)
    a = ap.parse_args()
    check_common_arguments(ap, a)
    if not 1 <= a.min_len <= a.max_len:
        ap.error("need 1 <= --min-len <= --max-len")

    torch.manual_seed(a.seed)
    lengths = random.Random(a.seed)
    data = torch.Generator(device="cuda")
    data.manual_seed(a.seed)
    model = Model(a.vocab, a.d_model, a.layers, a.heads, a.ff).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    timer = StepTimer(a.steps)
    watch = ShimWatch()
    loss = None
    for step in range(a.steps):
        timer.mark(step)
        watch.sample()
        seq = lengths.randint(a.min_len, a.max_len)
        tokens = torch.randint(0, a.vocab, (a.batch, seq + 1), device="cuda", generator=data)
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    step_ms = timer.finish()
    watch.sample()
    emit("transformer", step_ms, a.warmup, float(loss.item()), watch, train_window=timer.window)


if __name__ == "__main__":
    main()
