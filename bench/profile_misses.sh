#!/usr/bin/env bash
# Nsight Compute profiles of Kiln's plans for the suite's cases whose goals were missed: the "why" in
# BENCHMARKS.md comes from these logs (kernel names, duration, memory and compute throughput).
#
#   bench/profile_misses.sh OUT_DIR CASE_ID...     e.g. layer_norm_16384x8192 fp8_recipe_8192x8192x8192
#
# Each case's spec comes from bench/suite/shapes.py (the transformer block's steps too: block_ln1_t16 ...).
# One `kiln run SPEC` per case under `ncu --clock-control none` (the GPU's own clocks, as the suite runs),
# sections SpeedOfLight and LaunchStats, every kernel of the process (input generation included: the plan's
# kernels are the ones named after cuDNN's engines). KILN_PROFILE_STORE names a store holding the tuned
# plans (the suite's work-*/suite_store.db); without one, plans come from cuDNN's heuristics.
# KILN_BUILD_DIR (default build/) holds kiln. Writes OUT_DIR/ncu-CASE.txt; exit 1 if a profile failed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: bench/profile_misses.sh OUT_DIR CASE_ID...}"; shift
kiln="${KILN_BUILD_DIR:-$root/build}/kiln"
ncu="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
mkdir -p "$out/specs"
KILN_ROOT="$root" python3 - "$out/specs" "$@" <<'PY' || exit 2
import json, os, sys
sys.path.insert(0, os.path.join(os.environ.get("KILN_ROOT", "."), "bench", "suite"))
import shapes
dest, ids = sys.argv[1], sys.argv[2:]
specs = {c["id"]: c["spec"] for c in shapes.cases()}
for b, t in shapes.BLOCK_SHAPES:
    for s in shapes.block_specs(b, t)[1]:
        specs[s["spec"]["name"]] = s["spec"]
for i in ids:
    if i not in specs:
        sys.exit(f"profile_misses: unknown case '{i}' (see bench/suite/shapes.py)")
    json.dump(specs[i], open(os.path.join(dest, i + ".json"), "w"), indent=1)
PY
failed=0
for id in "$@"; do
  echo "[$(date +%T)] ncu $id"
  timeout 180 "$ncu" --clock-control none --section SpeedOfLight --section LaunchStats --target-processes all \
    "$kiln" run "$out/specs/$id.json" ${KILN_PROFILE_STORE:+--store "$KILN_PROFILE_STORE"} >"$out/ncu-$id.txt" 2>&1
  rc=$?; [ $rc -eq 0 ] || { echo "  exit $rc"; failed=1; }
  grep -E "^  [A-Za-z_].*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|^[a-z_0-9]+: plan" \
    "$out/ncu-$id.txt" | head -60
done
exit $failed
