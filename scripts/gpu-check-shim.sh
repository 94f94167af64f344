#!/usr/bin/env bash
# Real-GPU check of libgpumem_shim.so: builds small CUDA programs with nvcc (static
# runtime, the default, and -cudart shared) and runs them under the shim with the
# shim's own counters checked by the programs (each prints PASS <scenario>).
#
# Usage: scripts/gpu-check-shim.sh [--build DIR] [--out DIR]
#   --build DIR  a gpumem build holding lib/libgpumem_shim.so and bin/gpumem-run
#                (default: .carry/build-gpu, else build)
#   --out DIR    where programs and logs go (default: $OUT or ./gpu-check-shim-out)
# Needs nvcc and a GPU; builds nothing of gpumem itself (carry a build here).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=
out=${OUT:-$PWD/gpu-check-shim-out}
while (($#)); do
  case $1 in
    --build) build=$2; shift ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "gpu-check-shim: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$build" ]; then
  for b in "$here/.carry/build-gpu" "$here/.carry/shim" "$here/build"; do
    [ -f "$b/lib/libgpumem_shim.so" ] && { build=$b; break; }
  done
fi
shim=$build/lib/libgpumem_shim.so
run=$build/bin/gpumem-run
[ -f "$shim" ] || { echo "gpu-check-shim: no libgpumem_shim.so under '$build'" >&2; exit 2; }
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
command -v nvcc >/dev/null || { echo "gpu-check-shim: nvcc not found" >&2; exit 2; }
nvidia-smi -L >/dev/null 2>&1 || { echo "gpu-check-shim: no GPU (nvidia-smi -L failed)" >&2; exit 2; }
mkdir -p "$out"
cuda_inc=$(dirname "$(command -v nvcc)")/../include
arch=${CUDA_ARCH:-native}

echo "== building test programs ($out)"
set -e
nvcc -O2 -arch="$arch" -o "$out/gpu_app_static" "$here/tests/shim/gpu/shim_gpu_app.cu" -ldl
nvcc -O2 -arch="$arch" -cudart shared -o "$out/gpu_app_shared" "$here/tests/shim/gpu/shim_gpu_app.cu" -ldl
nvcc -O2 -cudart shared -Xcompiler -Wno-deprecated-declarations -o "$out/rt_app" \
  "$here/tests/shim/programs/rt_app.cpp" -ldl
gcc -O2 -I"$cuda_inc" -o "$out/drv_app" "$here/tests/shim/programs/drv_app.c" -ldl
gcc -O2 -I"$cuda_inc" -o "$out/ctx_app" "$here/tests/shim/programs/ctx_app.c" -ldl -lpthread
nvcc -O2 -cudart shared -o "$out/disable_overhead" "$here/tests/shim/gpu/disable_overhead.cpp"
nvcc -O2 -cudart shared -o "$out/alloc_latency" "$here/tests/shim/gpu/alloc_latency.cpp"
set +e

pass=0 fail=0
# check NAME EXPECT -- ENV... -- PROGRAM ARGS: EXPECT is a regex the output must match.
check() {
  local name=$1 expect=$2; shift 2
  local log="$out/$name.log"
  env "$@" >"$log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] && grep -Eq "$expect" "$log"; then
    pass=$((pass + 1)); echo "PASS  $name"
  else
    fail=$((fail + 1)); echo "FAIL  $name (exit $rc; $log)"; tail -5 "$log" | sed 's/^/      /'
  fi
}
P="LD_PRELOAD=$shim"
for app in gpu_app_static gpu_app_shared; do
  for sc in served safe capture errors; do
    check "$app-$sc" "PASS $sc" "$P" "$out/$app" "$sc"
  done
  # The pool served them (static runtime: through cuGetProcAddress; shared: cudaMalloc).
  check "$app-served-counts" "chain_allocations=105 " "$P" "$out/$app" served
  check "$app-disabled" "PASS served.*|mode=2" "$P" GPUMEM_DISABLE=1 "$out/$app" served
done
check "gpu_app_shared-served-runtime-entry" "runtime_allocations=105 " "$P" "$out/gpu_app_shared" served
check "gpu_app_static-served-driver-entry" "runtime_allocations=0 " "$P" "$out/gpu_app_static" served
# (rt_app's "safe" writes device memory from a host function: simulated device only.)
for sc in served errors cross capture capture-refusals fork queries threads pools; do
  check "rt_app-$sc" "PASS $sc" "$P" "$out/rt_app" "$sc"
done
# What CUDA refuses during a capture, and what it allows, are CUDA's own answers:
# the same scenarios pass without gpumem.
check "rt_app-capture-refusals-plain" "PASS capture-refusals" "$out/rt_app" capture-refusals
# So are the results of bad frees (and the runtime's last error after each).
check "rt_app-errors-plain" "PASS errors" "$out/rt_app" errors
check "gpu_app_shared-capture-plain" "PASS capture" "$out/gpu_app_shared" capture
check "rt_app-queries-limit" "MEMINFO free=50331648 total=67108864" "$P" GPUMEM_LIMIT=64MiB "$out/rt_app" queries
for sc in dlsym gpa; do
  check "drv_app-$sc" "PASS $sc" "$P" "$out/drv_app" "$sc"
done
# Memory of a context the program creates counts against the limit (64 MiB: 40 pooled,
# 20 in the created context, 8 more refused); and the scenario holds without gpumem.
check "ctx_app-limit" "MEMINFO primary free=4194304 total=67108864" "$P" GPUMEM_LIMIT=64MiB "$out/ctx_app" limit 67108864
check "ctx_app-limit-plain" "PASS limit" "$out/ctx_app" limit
if [ -x "$run" ]; then
  check "gpumem-run-report" "gpumem report" "$run" --report -- "$out/gpu_app_shared" served
  check "gpumem-run-log" "PASS served" "$run" --log "$out/log-%p-%d.csv" -- "$out/gpu_app_static" served
  # Rows queued for the log's helper thread: every row reaches the log at exit,
  # and the journal beside it is gone.
  rm -f "$out"/qlog.csv*
  check "gpumem-run-log-queue" "PASS served" "$run" --log "$out/qlog.csv" --log-queue -- "$out/gpu_app_static" served
  if [ -f "$out/qlog.csv.journal" ] || ! grep -q "^Thread," "$out/qlog.csv" || [ "$(grep -c ',allocate,' "$out/qlog.csv")" -lt 1 ]; then
    fail=$((fail + 1)); echo "FAIL  gpumem-run-log-queue: journal left behind or rows missing ($out/qlog.csv)"
  fi
fi
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
  # PyTorch with its own cache off: every tensor allocation reaches the shim
  # (shared libcudart from its wheel, exported cudaMalloc/cudaFree).
  cat >"$out/torch_check.py" <<'PY'
import torch
x = torch.randn(2048, 2048, device="cuda")
for _ in range(20):
    y = (x @ x).relu_()
    x = y / y.norm()
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
assert 0 < free <= total
print("TORCH OK", float(x.sum()))
PY
  check "pytorch-no-caching" "TORCH OK" "$P" PYTORCH_NO_CUDA_MEMORY_CACHING=1 GPUMEM_REPORT=1 python3 "$out/torch_check.py"
  grep -E "allocations [0-9]+" "$out/pytorch-no-caching.log" | sed 's/^/      /'
fi
echo "== GPUMEM_DISABLE=1 overhead (informational; best of 3 each)"
for i in 1 2 3; do echo "  no shim:          $("$out/disable_overhead")"; done
for i in 1 2 3; do echo "  shim, disabled:   $(env "$P" GPUMEM_DISABLE=1 "$out/disable_overhead")"; done
echo "== allocation latency (informational)"
echo "  plain CUDA:"; "$out/alloc_latency" | sed 's/^/    /'
echo "  gpumem (default config, safe mode):"; env "$P" "$out/alloc_latency" | sed 's/^/    /'
echo "  gpumem (stream mode):"; env "$P" GPUMEM_SYNC_MODE=stream "$out/alloc_latency" | sed 's/^/    /'
echo "gpu-check-shim: $pass passed, $fail failed"
[ $fail -eq 0 ]
