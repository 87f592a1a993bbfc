#!/usr/bin/env bash
# Kiln's benchmark suite (issue 15), on a GPU machine: Kiln's tuned plans against PyTorch eager,
# torch.compile and TunableOp on the same shapes in the same run, the hardware's limits, the cost of tuning,
# cold start, dynamic shapes, CUDA Graphs and one transformer block; then the report.
#
#   bench/run_suite.sh OUT_DIR [PART...]
#
# PART (default: all five, in this order; each writes OUT_DIR/<part>-kiln.json and <part>-torch.json,
# rewritten after every measurement, with a log beside each; the Kiln side runs first):
#   conv       conv+bias+ReLU on ResNet-50 layers                             (Kiln and PyTorch)
#   gemm       matmul+bias+GELU, plain matmul, matmul+AMAX                    (Kiln and PyTorch)
#   attention  the FP8 recipe, SDPA forward, layer norm, RMS norm             (Kiln and PyTorch)
#   band       attention with a diagonal band: sliding window, chunked prefill, decode (Kiln and PyTorch,
#              FlexAttention included; not in the default parts)
#   block      the bf16 transformer block at 1x16 and 1x2048 tokens           (Kiln and PyTorch)
#   runtime    cold start, CUDA Graphs, dynamic shapes                        (Kiln)
#   cases      only the case ids in KILN_SUITE_CASES (comma-separated): to measure some cases again; the
#              report takes a case's later figures over its earlier ones (give this part's files last)
# KILN_SUITE_DYNAMIC_FROM=FILE takes the dynamic-shape results from an earlier bench/planner_bench.py
# run's JSON instead of running it again (about five minutes); the report names the file and its meta.
# The cases are bench/suite/shapes.py's; the method of each side is in bench/README.md.
# Then, when the Python has matplotlib, bench/report.py merges every part file in OUT_DIR into
# OUT_DIR/suite.json, summary.json, the charts and OUT_DIR/BENCHMARKS.md (else run it where matplotlib is:
# `python3 bench/report.py OUT_DIR/*-*.json --out-dir bench/results/h200 --markdown BENCHMARKS.md`).
#
# Environment: KILN_BUILD_DIR (default build/) holds kiln and benchmarks/ (block_bench, plan_load_bench,
# planner_cold_start, capture_bench); PYTHON (default /opt/torch/.venv/bin/python when it exists, else
# python3) has PyTorch; KILN_SUITE_PART_TIMEOUT caps each side of a part in seconds (default 1800; a side stopped at its
# limit keeps what it wrote); KILN_SUITE_TORCH_BUDGET (seconds, default 0: none) makes the PyTorch side
# skip, and list as skipped, any measurement that would start after it (cheap ones run first, compiles last).
# Exit 0 when every side of every part ran to its end (whatever it measured), 1 otherwise, naming each;
# 2 for bad arguments (an unknown part is refused before any part runs), 3 when kiln doctor finds no GPU.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: bench/run_suite.sh OUT_DIR [conv|gemm|attention|band|block|runtime|cases ...]"
[ $# -ge 1 ] && [ -n "$1" ] || { echo "$usage" >&2; exit 2; }
out="$1"; shift
parts=("$@"); [ ${#parts[@]} -gt 0 ] || parts=(conv gemm attention block runtime)
for p in "${parts[@]}"; do  # every part named is checked before any runs
  case "$p" in conv|gemm|attention|band|block|runtime|cases) ;;
    *) echo "run_suite: unknown part '$p' (conv, gemm, attention, band, block, runtime, cases)" >&2; exit 2;; esac
done
build="${KILN_BUILD_DIR:-$root/build}"
py="${PYTHON:-}"; [ -n "$py" ] || { [ -x /opt/torch/.venv/bin/python ] && py=/opt/torch/.venv/bin/python || py=python3; }
limit="${KILN_SUITE_PART_TIMEOUT:-1800}"
[ -x "$build/kiln" ] || { echo "run_suite: no $build/kiln (build first, or set KILN_BUILD_DIR)" >&2; exit 2; }
# The suite measures a GPU: without a usable one nothing it would write means anything.
if ! doctor="$("$build/kiln" doctor 2>&1)"; then
  echo "$doctor" | tail -3 >&2
  echo "run_suite: kiln doctor finds no usable GPU; the suite runs on a GPU machine (nothing was measured)" >&2
  exit 3
fi
mkdir -p "$out"; out="$(cd "$out" && pwd)"
rev="${KILN_GIT_REVISION:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}"
export KILN_GIT_REVISION="$rev" PYTHONUNBUFFERED=1
failed=()
side() {  # side NAME COMMAND...: runs one side of a part with its log, records a failure
  local name="$1"; shift
  echo "[$(date +%T)] $name"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1; local rc=$?
  tail -5 "$out/$name.log"
  [ $rc -eq 0 ] || failed+=("$name: exit $rc$([ $rc -eq 124 ] && echo ' (timed out)')")
}
pair() {  # pair PART FAMILIES [EXTRA...]: the Kiln side first (bounded by its tuner), then PyTorch's
  local part="$1" fams="$2"; shift 2
  side "$part-kiln" python3 "$root/bench/suite/kiln_side.py" --kiln "$build/kiln" --out "$out/$part-kiln.json" \
    --families "$fams" --work "$out/work-$part" "$@"
  # Where PyTorch's Python can import kiln, the PyTorch side also times the plans Kiln serves from the store the
  # Kiln side tuned into, with its own timer (torch_peers.py step 4): one harness for both sides.
  local same=()
  if [ "$fams" != none ] && "$py" -c 'import kiln.torch' >/dev/null 2>&1; then
    same=(--kiln-store "$out/work-$part/suite_store.db")
  else
    echo "[$(date +%T)] $part: no kiln package for $py (PYTHONPATH): Kiln's plans are not timed by PyTorch's harness"
  fi
  side "$part-torch" "$py" "$root/bench/suite/torch_peers.py" --out "$out/$part-torch.json" --families "$fams" \
    --time-budget-s "${KILN_SUITE_TORCH_BUDGET:-0}" "${same[@]}" "$@"
}
for p in "${parts[@]}"; do
  case "$p" in
    conv)      pair conv conv_bias_relu;;
    gemm)      pair gemm matmul_bias_gelu,matmul,matmul_amax;;
    attention) pair attention fp8_recipe,sdpa,layer_norm,rms_norm;;
    band)      pair band sdpa_band;;
    block)     pair block none --block;;
    cases)     pair cases "" --cases "${KILN_SUITE_CASES:?the part cases needs KILN_SUITE_CASES=id1,id2}";;
    runtime)   dyn=(--dynamic); [ -z "${KILN_SUITE_DYNAMIC_FROM:-}" ] || dyn=(--dynamic-from "$KILN_SUITE_DYNAMIC_FROM")
               side runtime-kiln python3 "$root/bench/suite/kiln_side.py" --kiln "$build/kiln" --out "$out/runtime-kiln.json" \
                 --families none --capture --coldstart "${dyn[@]}" --work "$out/work-runtime";;
    *) echo "run_suite: unknown part '$p' (conv, gemm, attention, band, block, runtime)" >&2; exit 2;;
  esac
done
if "$py" -c "import matplotlib" 2>/dev/null; then
  shopt -s nullglob
  parts_files=(); for f in "$out"/*-torch.json "$out"/*-kiln.json; do [[ "$f" == */cases-* ]] || parts_files+=("$f"); done
  for f in "$out"/cases-*.json; do [ -f "$f" ] && parts_files+=("$f"); done  # re-measured cases last: they win
  side report "$py" "$root/bench/report.py" "${parts_files[@]}" --out-dir "$out" --markdown "$out/BENCHMARKS.md"
else
  echo "[$(date +%T)] report: no matplotlib in $py; run bench/report.py where it is (see the header)"
fi
if ((${#failed[@]})); then printf 'run_suite FAILED: %s\n' "${failed[@]}"; exit 1; fi
echo "run_suite: ${parts[*]} done; results in $out"
