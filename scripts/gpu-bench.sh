#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu-tier.sh built build-gpu: tunes each example twice into a fresh
# store (the second run re-measures the incumbent in a separate process and applies the incumbent rule),
# then benchmarks plan load vs heuristic build. Logs go to OUT_DIR (tune errors included, in tune.log).
# Exits 1 when any step failed (a tune that did not exit 0, a timeout, the load benchmark), naming each.
#   scripts/gpu-bench.sh OUT_DIR [EXAMPLE...]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/gpu-bench.sh OUT_DIR [EXAMPLE...]}"; shift
build="${KILN_GPU_BUILD_DIR:-$root/build-gpu}"
examples=("$@")
[ ${#examples[@]} -gt 0 ] || examples=(conv_bias_relu conv_dgrad matmul_bias_gelu matmul_amax layer_norm rms_norm sdpa_fwd)
mkdir -p "$out"; store="$out/bench_store.db"; rm -f "$store"*
cd "$root"
failed=()
for e in "${examples[@]}"; do
  for pass in 1 2; do
    echo "=== tune $e (pass $pass)"
    # Pass 1 also times the unfused alternative (multi-node graphs); pass 2 re-measures the winner only.
    extra=(); [ "$pass" = 2 ] && extra=(--no-unfused)
    timeout 150 "$build/kiln" tune "examples/$e.json" --store "$store" --candidate-budget-ms "${KILN_BENCH_CANDIDATE_MS:-100}" --budget 60 "${extra[@]}" 2>&1
    rc=$?; echo "=== tune $e (pass $pass) exit $rc"
    [ $rc -eq 0 ] || failed+=("tune $e pass $pass: exit $rc$([ $rc -eq 124 ] && echo ' (timed out)')")
  done
done >"$out/tune.log" 2>&1
"$build/kiln" plans ls --store "$store" >>"$out/tune.log" 2>&1 || failed+=("plans ls: exit $?")
timeout 240 "$build/benchmarks/plan_load_bench" --reps 5 --shapes 100 $(printf 'examples/%s.json ' "${examples[@]}") >"$out/load_bench.log" 2>&1
rc=$?; echo "plan_load_bench exit $rc" >>"$out/load_bench.log"
[ $rc -eq 0 ] || failed+=("plan_load_bench: exit $rc")
if ((${#failed[@]})); then
  printf 'gpu-bench FAILED: %s\n' "${failed[@]}" | tee -a "$out/tune.log"; exit 1
fi
echo "gpu-bench: all ${#examples[@]} examples tuned twice, load benchmark done" | tee -a "$out/tune.log"
