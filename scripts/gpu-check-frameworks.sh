#!/usr/bin/env bash
# Real frameworks under gpumem on a GPU machine: PyTorch (caching allocator off;
# and on, with expandable segments, under a limit; in a green context on pooled tensors;
# CUDA graphs with and without its cache; its log truncated while faulthandler or a
# blocked SIGBUS is in force),
# CuPy (pool off), Numba, JAX (XLA's arena, and its per-buffer allocator) — each
# checks its results and, through the shim's counters, that the chain served its
# allocations. Then the PyTorch MLP benchmark
# (bench/frameworks/pytorch_mlp.py: 8 layers, 2048 wide, AdamW) side by side (caching allocator / cudaMalloc per tensor / gpumem safe / gpumem
# stream), and the allocation-log worked example (log, report, replay).
#
# Usage: scripts/gpu-check-frameworks.sh [--build DIR] [--out DIR] [--quick]
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/.carry/build-gpu out=${OUT:-$PWD/gpu-check-frameworks-out} quick=0
while (($#)); do
  case $1 in
    --build) build=$2; shift ;;
    --out) out=$2; shift ;;
    --quick) quick=1 ;;
    *) echo "gpu-check-frameworks: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
run=$build/bin/gpumem-run
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$here/tests/frameworks${PYTHONPATH:+:$PYTHONPATH}"
pass=0 fail=0
verdict() { if [ "$2" -eq 0 ]; then pass=$((pass + 1)); echo "PASS  $1"; else fail=$((fail + 1)); echo "FAIL  $1 (exit $2)"; fi; }
fw=$here/tests/frameworks

echo "== frameworks: results equal without and with gpumem; the chain served them"
ref=$(PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 "$fw/torch_step.py" | sed -n 's/^TORCH loss=\([^ ]*\).*/\1/p')
echo "  pytorch reference loss (no shim): $ref"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$run" -- python3 "$fw/torch_step.py" "$ref" 2>&1 | tee "$out/fw-pytorch.log"
verdict pytorch "${PIPESTATUS[0]}"
# PyTorch's DataLoader with pin_memory=True (worker processes, the pinning thread,
# non-blocking copies) over gpumem's pinned pool: the same checksum, bit for bit, with
# PyTorch's pinned cache as it is and emptied after every batch (most pinned tensors
# then reach cudaHostAlloc and cudaFreeHost, with their copies still queued).
for empty in "" --empty-cache; do
  ref_pin=$(python3 "$fw/torch_pin_memory_check.py" $empty | sed -n 's/^TORCH-PIN checksum=\([^ ]*\).*/\1/p')
  "$run" --host-pool -- python3 "$fw/torch_pin_memory_check.py" $empty --expect "$ref_pin" --expect-host-chain 2>&1 |
    tee "$out/fw-pytorch-pin$empty.log"
  verdict "pytorch-pin-memory${empty:+ (cache emptied)}" "${PIPESTATUS[0]}"
done
# PyTorch's caching allocator with expandable segments creates and maps its own
# memory: counted and held to the limit, results unchanged.
es_conf="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
ref_es=$(env "$es_conf" python3 "$fw/torch_expandable_check.py" | sed -n 's/^TORCH-EXPANDABLE loss=\([^ ]*\).*/\1/p')
env "$es_conf" GPUMEM_LIMIT=2GiB "$run" -- python3 "$fw/torch_expandable_check.py" --limit $((2 << 30)) \
  --expected-loss "$ref_es" 2>&1 | tee "$out/fw-pytorch-expandable.log"
verdict pytorch-expandable-segments-limited "${PIPESTATUS[0]}"
# PyTorch's green contexts: products in the green context read a pooled tensor that
# is freed, and its block refilled on the primary context, while they run.
ref_green=$(PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 "$fw/torch_green_context_check.py" |
  sed -n 's/^TORCH-GREEN checksum=\([^ ]*\).*/\1/p')
if [ -n "$ref_green" ]; then
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$run" -- python3 "$fw/torch_green_context_check.py" "$ref_green" 2>&1 |
    tee "$out/fw-pytorch-green.log"
  verdict pytorch-green-context "${PIPESTATUS[0]}"
else
  echo "SKIP  pytorch-green-context (this PyTorch or driver has no green contexts)"
fi
# PyTorch CUDA graphs, with its caching allocator (the graph's private pool) and
# without (CUDA refuses cudaMalloc during the capture, and must under gpumem too):
# the outcome of the run without gpumem, replays equal to eager runs, and no memory
# the graph uses handed to another tensor.
graph_outcome() { sed -n -e 's/^TORCH-GRAPH refused.*/refused/p' -e 's/^TORCH-GRAPH ok checksum=\([^ ]*\).*/\1/p'; }
for caching in 1 0; do
  nc=() label=pytorch-cuda-graph
  ((caching)) || { nc=(PYTORCH_NO_CUDA_MEMORY_CACHING=1); label=pytorch-cuda-graph-uncached; }
  ref_graph=$(env "${nc[@]}" python3 "$fw/torch_cuda_graph_check.py" | graph_outcome)
  echo "  $label outcome without gpumem: $ref_graph"
  env "${nc[@]}" "$run" -- python3 "$fw/torch_cuda_graph_check.py" "$ref_graph" 2>&1 | tee "$out/fw-$label.log"
  verdict "$label" "${PIPESTATUS[0]}"
done
# The allocation log emptied under PyTorch (copytruncate) after the program enabled
# faulthandler (its SIGBUS handler ends the process on any fault) or blocked SIGBUS
# in its thread: the program goes on. (The journal beside the log is gpumem's own
# file and is mapped: truncating it is out of scope, as the README says.)
for mode in faulthandler blocked; do
  label=pytorch-log-truncated-$mode
  cut=$out/$label.csv
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$run" --log "$out/$label.csv" -- \
    python3 "$fw/torch_log_signals_check.py" $mode "$cut" 2>&1 | tee "$out/fw-$label.log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ] && ! grep -q "^TORCH-LOG-SIGNALS ok" "$out/fw-$label.log"; then rc=1; fi
  verdict "$label" "$rc"
  rm -f "$out/$label.csv" "$out/$label.csv.journal"
done
"$run" -- python3 "$fw/cupy_check.py" --expect-shim 2>&1 | tee "$out/fw-cupy.log"; verdict cupy "${PIPESTATUS[0]}"
"$run" -- python3 "$fw/numba_check.py" --expect-shim 2>&1 | tee "$out/fw-numba.log"; verdict numba "${PIPESTATUS[0]}"
# JAX: XLA's arena and its platform allocator create their own memory (limited,
# counted, logged; the arena sized from the limit); cuda_async buffers are pooled.
GPUMEM_LIMIT=8GiB "$run" -- python3 "$fw/jax_check.py" --expect-shim --min-created 1 --max-limit $((8 << 30)) 2>&1 |
  tee "$out/fw-jax.log"
verdict jax-arena-limited "${PIPESTATUS[0]}"
XLA_PYTHON_CLIENT_ALLOCATOR=platform "$run" -- python3 "$fw/jax_check.py" --expect-shim --min-created 1 2>&1 |
  tee "$out/fw-jax-platform.log"
verdict jax-platform-allocator "${PIPESTATUS[0]}"
XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async XLA_PYTHON_CLIENT_PREALLOCATE=false "$run" -- \
  python3 "$fw/jax_check.py" --expect-shim --min-served 20 2>&1 | tee "$out/fw-jax-cuda-async.log"
verdict jax-cuda-async-pooled "${PIPESTATUS[0]}"

echo "== PyTorch MLP (8 layers, 2048 wide, AdamW), side by side (ms/step)"
steps=100; ((quick)) && steps=20
mlp=(python3 "$here/bench/frameworks/pytorch_mlp.py" --steps $steps)
{
  MLP_LABEL=caching "${mlp[@]}"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 MLP_LABEL=cudaMalloc "${mlp[@]}"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 MLP_LABEL=gpumem-safe "$run" -- "${mlp[@]}"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 MLP_LABEL=gpumem-stream "$run" --sync-mode stream -- "${mlp[@]}"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 MLP_LABEL=gpumem-safe-logging "$run" --log "$out/mlp-bench-%p.csv" -- "${mlp[@]}"
} 2>&1 | tee "$out/mlp.txt"
grep -q "label=gpumem-safe " "$out/mlp.txt"; verdict mlp-under-gpumem $?
rm -f "$out"/mlp-bench-*.csv  # large; the worked example below keeps a small log

echo "== worked example: log a training step, report it, replay it through three chains"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 MLP_LABEL=logged "$run" --log "$out/mlp-train.csv" --report -- \
  python3 "$here/bench/frameworks/pytorch_mlp.py" --batches 256 --steps 3 --warmup 1 2>&1 | tee "$out/example-run.txt"
"$build/bin/gpumem-report" "$out/mlp-train.csv" --html "$out/mlp-train.html" \
  >"$out/example-report.txt" 2>&1
verdict report $?
"$build/bin/gpumem-replay" "$out/mlp-train.csv" --config "$here/config/default.toml" \
  --config "$here/config/binning.toml" --config "$here/config/limited-pool.toml" >"$out/example-replay.txt" 2>&1
verdict replay $?
cat "$out/example-replay.txt"
gzip -f "$out/mlp-train.csv"

echo "gpu-check-frameworks: $pass passed, $fail failed"
[ $fail -eq 0 ]
