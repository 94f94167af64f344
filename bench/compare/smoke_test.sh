#!/usr/bin/env bash
# CTest: scripts/bench-compare end to end on the simulated device, one round — every
# measurement of both programs must leave samples for gpumem's contenders, the shim
# rows must be there, and the report must have every table, its raw data and the plot.
# Usage: smoke_test.sh BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$1
out=$(mktemp -d "${TMPDIR:-/tmp}/bench-compare-smoke.XXXXXX")
trap 'rm -rf "$out"' EXIT
"$here/scripts/bench-compare" --sim --rounds 1 --build "$build" --out "$out" >"$out/console.txt" 2>&1
rc=$?
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; fi; }
check "bench-compare exits 0 (got $rc)" '[ $rc -eq 0 ]'
for f in comparison.md samples.jsonl samples.csv samples.json latency-ratio.svg run.log; do
  check "$f written" "[ -s '$out/$f' ]"
done
for section in "## 1. Pair latency" "## 2. Scaling over threads" "Why two harnesses disagree" \
               "## 3a. Random allocations" "## 3b. Multi-stream allocations" "## 4. Memory efficiency" \
               "## 6. What the allocation log adds"; do
  check "comparison.md has '$section'" "grep -qF '$section' '$out/comparison.md'"
done
python3 - "$out/samples.jsonl" <<'PY' || fail=1
import json, sys
samples = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
samples = [s for s in samples if s.get("type") == "sample"]
have = {(s["measurement"], s["contender"]) for s in samples}
want = [(m, c) for m in ("latency", "scaling", "random", "multistream", "replay")
        for c in ("gpumem pool", "gpumem binning", "gpumem default chain", "cudaMallocAsync")]
want += [(m, c) for m in ("latency", "scaling") for c in ("plain: cudaMalloc", "shim safe: cudaMalloc",
         "shim stream: cudaMallocAsync")]
want += [("latency", c) for c in ("shim safe log: cudaMalloc", "shim safe log: cudaMallocAsync",
                                  "shim safe log queued: cudaMalloc", "shim safe log queued: cudaMallocAsync")]
want += [("replay", c) for c in ("plain", "shim safe", "shim stream")]
missing = [w for w in want if w not in have]
bad = [s for s in samples if s["value"] is None or s["value"] < 0]
for m in missing:
    print("FAIL: no samples for", m)
for s in bad[:5]:
    print("FAIL: bad value", s)
sys.exit(1 if missing or bad else 0)
PY
if ((fail)); then
  echo "--- bench-compare output:"; tail -40 "$out/console.txt"
  exit 1
fi
echo "bench-compare smoke test: all measurements and tables present"
