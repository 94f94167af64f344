"""Footprint workload 2: an LLM-style decoder, trained and then generating.

A Llama model built from transformers.LlamaConfig with random weights (nothing is
downloaded): hidden 1024, 16 layers, 16 heads, intermediate 2560, vocabulary 32000,
untied embeddings, 258.5 M parameters, SDPA attention where transformers accepts
it. 40 training steps with bf16 autocast and fused AdamW on random tokens, batch drawn
from 2..8 and sequence length from 64..1024 each step (random.Random(seed)); then
greedy model.generate() with the KV cache, 64 new tokens for a batch of 4 prompts of
16, 128 and 512 tokens. Training steps are timed with CUDA events (the first --warmup
left out), generation with the host clock around each call. Prints one JSON line:
ms/step, the final loss, generation seconds, PyTorch's peak reserved/allocated bytes
(meaningful with its caching allocator only) and, under gpumem, the shim's counters.

footprint_run.py runs it under each allocator configuration and measures the device
memory it holds from outside; by hand:
  python3 footprint_decoder.py
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 gpumem-run --report -- python3 footprint_decoder.py
"""
import argparse
import random
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

from footprint_common import ShimWatch, StepTimer, add_common_arguments, check_common_arguments, emit


def build_model(a: argparse.Namespace) -> LlamaForCausalLM:
    shape = dict(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
                 num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.heads,
                 max_position_embeddings=2048, tie_word_embeddings=False)
    # Built on the device: initialising 258.5 M parameters on the host and copying them
    # would take longer than the training steps.
    with torch.device("cuda"):
        try:
            return LlamaForCausalLM(LlamaConfig(**shape, attn_implementation="sdpa"))
        except (TypeError, ValueError, ImportError):  # a transformers that does not offer SDPA here
            return LlamaForCausalLM(LlamaConfig(**shape))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(ap, steps=40)
    ap.add_argument("--min-batch", type=int, default=2)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--min-len", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--intermediate", type=int, default=2560)
    ap.add_argument("--prompts", default="16,128,512", help="prompt lengths for generate(), comma-separated")
    ap.add_argument("--gen-batch", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=64)
    a = ap.parse_args()
    check_common_arguments(ap, a)
    prompts = [int(n) for n in a.prompts.split(",")]
    if not (1 <= a.min_batch <= a.max_batch and 2 <= a.min_len <= a.max_len and min(prompts) >= 1
            and max(a.max_len, max(prompts) + a.new_tokens) <= 2048):
        ap.error("need 1 <= --min-batch <= --max-batch, 2 <= --min-len <= --max-len, prompts >= 1 "
                 "and every sequence within 2048 positions")

    torch.manual_seed(a.seed)
    shapes = random.Random(a.seed)
    data = torch.Generator(device="cuda")
    data.manual_seed(a.seed)
    model = build_model(a)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    timer = StepTimer(a.steps)
    watch = ShimWatch()
    loss = None
    for step in range(a.steps):
        timer.mark(step)
        watch.sample()
        batch = shapes.randint(a.min_batch, a.max_batch)
        seq = shapes.randint(a.min_len, a.max_len)
        tokens = torch.randint(0, a.vocab, (batch, seq), device="cuda", generator=data)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=tokens, labels=tokens, use_cache=False).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    step_ms = timer.finish()
    watch.sample()
    final_loss = float(loss.item())

    model.eval()
    generate_s = {}
    generated = 0
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
        for n in prompts:
            prompt = torch.randint(0, a.vocab, (a.gen_batch, n), device="cuda", generator=data)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            # min_new_tokens: a random model may emit its end token early; every
            # configuration must generate the same number of tokens.
            out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                 max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens, use_cache=True,
                                 pad_token_id=0)
            torch.cuda.synchronize()
            generate_s[str(n)] = time.perf_counter() - t0
            generated += out.numel() - prompt.numel()
            watch.sample()

    emit("decoder", step_ms, a.warmup, final_loss, watch,
         train_window=timer.window,
         generate_s=sum(generate_s.values()),
         generate_s_by_prompt=generate_s,
         generated_tokens=generated,
         params=sum(p.numel() for p in model.parameters()),
         attn_implementation=getattr(model.config, "_attn_implementation", None),
         transformers_version=transformers.__version__)


if __name__ == "__main__":
    main()
