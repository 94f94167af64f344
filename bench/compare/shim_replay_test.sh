#!/usr/bin/env bash
# CTest: under the shim (simulated device, safe and stream mode), gpumem_compare_shim
# replays a log in a process of its own, so the replay's peak reserved counts nothing
# that the pair measurement before it left in the shim's pool: the pairs grow the pool
# to 64 MiB; the log needs 4 MiB.
# Usage: shim_replay_test.sh BUILD_DIR
set -uo pipefail
build=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/shim-replay-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
{
  echo "Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result"
  for i in 1 2 3 4; do echo "1,00:00:00.00000$i,allocate,0x${i}00000,1048576,0,0,cudaMalloc,$i,1,CUDA_SUCCESS"; done
  for i in 1 2 3 4; do echo "1,00:00:00.00001$i,free,0x${i}00000,1048576,0,0,cudaFree,1$i,1,CUDA_SUCCESS"; done
} >"$work/log.csv"
fail=0
for mode in safe stream; do
  rm -f "$work/out.jsonl"
  LD_LIBRARY_PATH="$build/simdevice${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" GPUMEM_SIM_DEVICE_MEMORY=1GiB \
    GPUMEM_SYNC_MODE=$mode LD_PRELOAD="$build/lib/libgpumem_shim.so" \
    "$build/bin/gpumem_compare_shim" --label "shim $mode" --expect-shim --only latency,replay --latency-sizes 64M \
    --time-scale 0.01 --replay "tiny=$work/log.csv" --out "$work/out.jsonl" || { echo "FAIL: $mode: exit $?"; fail=1; }
  python3 - "$work/out.jsonl" "$mode" <<'PY' || fail=1
import json, sys
path, mode = sys.argv[1], sys.argv[2]
records = [json.loads(l) for l in open(path) if l.startswith("{")]
value = {(r["measurement"], r["metric"]): r["value"] for r in records if r.get("type") == "sample"}
problems = []
if ("latency", "ns_per_pair") not in value:
    problems.append("no latency sample: the pairs did not run")
live, reserved = value.get(("replay", "peak_live")), value.get(("replay", "peak_reserved"))
at_start = value.get(("replay", "reserved_at_start"))
if live != 4 << 20:
    problems.append(f"peak live {live}, expected 4 MiB")
if at_start is None or at_start > 2 << 20:
    problems.append(f"the shim's pool held {at_start} bytes when the replay began (the first allocation's 2 MiB at most)")
if reserved is None or reserved >= 16 << 20:
    problems.append(f"peak reserved {reserved} for a log of 4 MiB: the pairs' 64 MiB counted")
for p in problems:
    print(f"FAIL: {mode}: {p}")
sys.exit(1 if problems else 0)
PY
done
((fail)) && exit 1
echo "shim replay test: each log replayed from an empty pool, in safe and stream mode"
