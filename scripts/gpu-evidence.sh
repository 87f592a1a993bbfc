#!/usr/bin/env bash
# Everything the issues ask to be shown on the GPU machine, in one call (cold starts are expensive):
#   scripts/gpu-evidence.sh OUT_DIR [PHASE...]     PHASE: tier checks bench store (default: all, in order)
#  1. scripts/gpu-tier.sh (build there, `kiln doctor`, `ctest -L gpu`)
#  2. scripts/gpu-bench.sh (tune every example twice into a fresh store, fused vs unfused on the first
#     pass; plan load vs build benchmark)
#  3. `kiln run --verify --reference both` on every example (host and device references)
#  4. scripts/torch_check.py (PyTorch's agreement for every example) with the venv's python
#  5. `kiln plans verify --deep` of the bench store; a new process loads every plan and runs it
# Logs land in OUT_DIR/logs and are packed into OUT_DIR/evidence.tgz (the device tool returns few files).
# Every phase runs even when an earlier one failed; the script ends with the list of failed steps and exits
# 1 when there is any (a non-zero exit, a timeout, a skipped GPU test in the tier).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/gpu-evidence.sh OUT_DIR [tier] [checks] [bench] [store]}"; shift
phases=" ${*:-tier checks bench store} "
want() { [[ "$phases" == *" $1 "* ]]; }
mkdir -p "$out/logs"; out="$(cd "$out" && pwd)"; logs="$out/logs"
build="${KILN_GPU_BUILD_DIR:-$root/build-gpu}"
py="${KILN_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
cd "$root"
stamp() { echo "[$(date +%T)] $*"; }
failed=()
check() {  # check RC WHAT: remember a failed step
  [ "$1" -eq 0 ] || failed+=("$2: exit $1$([ "$1" -eq 124 ] && echo ' (timed out)')")
}
if want tier; then
  stamp "gpu tier"; scripts/gpu-tier.sh "$logs/tier" >"$logs/tier.txt" 2>&1; rc=$?; echo "gpu-tier exit $rc"; check $rc "gpu tier"
  grep -E "tests passed|tests failed|\(Failed\)|\(SEGFAULT\)|Not Run|Skipped" "$logs/tier/ctest.log"
  grep -E "^FAIL:|^gpu tier:" "$logs/tier.txt"
  grep -h "OPCOV\|\[ unfused \]\|\[ run \]" "$logs/tier/ctest.log" | head -150 >"$logs/gpu_lines.txt"
fi
if want bench; then
stamp "bench"; timeout 400 scripts/gpu-bench.sh "$logs/bench" >"$logs/bench.txt" 2>&1; rc=$?; echo "gpu-bench exit $rc"; check $rc "gpu bench"
grep "FAILED" "$logs/bench.txt"
grep -E "^(best|winner|incumbent|  decision|fused vs|  fused|  unfused|    part|note:)|=== tune" "$logs/bench/tune.log" | head -120
tail -25 "$logs/bench/load_bench.log"
fi
if want checks; then
stamp "run --reference both"
for e in examples/*.json; do
  echo "== $e"; timeout 90 "$build/kiln" run "$e" --verify --reference both >"$logs/run_one.txt" 2>&1
  rc=$?; tail -8 "$logs/run_one.txt"; echo "exit $rc"; check $rc "run --verify --reference both $e"
done >"$logs/run_both.txt" 2>&1; rm -f "$logs/run_one.txt"
grep -E "^== |Passed|Incorrect|NotSupported|Failed|kiln:" "$logs/run_both.txt" | head -80
stamp "torch"; timeout 240 "$py" scripts/torch_check.py --kiln "$build/kiln" --out "$logs/torch" examples/*.json >"$logs/torch.txt" 2>&1
rc=$?; echo "torch_check exit $rc"; check $rc "torch_check"; tail -30 "$logs/torch.txt"
fi
if want store; then
stamp "store: deep verify, load in a new process"
store="$logs/bench/bench_store.db"
timeout 120 "$build/kiln" plans verify --deep --store "$store" --spec examples/*.json >"$logs/verify_deep.txt" 2>&1; rc=$?
echo "verify --deep exit $rc"; check $rc "plans verify --deep"
tail -20 "$logs/verify_deep.txt"
for e in examples/*.json; do
  timeout 60 "$build/kiln" run "$e" --store "$store" --verify >"$logs/run_one.txt" 2>&1
  rc=$?; head -3 "$logs/run_one.txt"; echo "exit $rc"; check $rc "run --store --verify $e"
done >"$logs/run_store.txt" 2>&1; rm -f "$logs/run_one.txt"; grep -E "from|Passed|Incorrect|kiln:" "$logs/run_store.txt" | head -40
fi
stamp done
tar --exclude='*.db' --exclude='*.db-*' -czf "$out/evidence.tgz" -C "$out" logs
if ((${#failed[@]})); then
  echo "gpu evidence: ${#failed[@]} step(s) FAILED:"; printf '  %s\n' "${failed[@]}"; exit 1
fi
echo "gpu evidence: every step passed"
