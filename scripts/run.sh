#!/usr/bin/env bash
# README command 1: set up, build, and run Kiln's main job on the embedded default: the shipped example
# graphs baked into the local SQLite plan store ($KILN_STORE, default ~/.cache/kiln/plans.db).
#  - With a GPU: `kiln tune` every example (every engine configuration timed and checked) into the store,
#    then per example a new process loads the stored plan and verifies it, and another builds one from
#    cuDNN's heuristics; scripts/main_report.py prints per graph the heuristic's and the tuned time, fused
#    vs unfused, load vs build time and where the plan came from.
#  - Without one: `kiln compile` them ahead of time for the recorded H200 (profiles/h200.json), untuned,
#    so the GPU machine loads them at start or tunes them in place (`kiln tune --store S --untuned`).
#    Graphs that cannot be compiled without a GPU are listed with the reason, as a result.
# Then lists the store and ends with a summary. Extra arguments go to `kiln tune` / `kiln compile`.
# Prints a line per stage ([setup], [configure], [build], [run], [summary]); with nothing changed since the
# last run it takes seconds.
set -euo pipefail
# The whole script is read before it runs (braces), so that editing or checking out a new version while
# it runs cannot change what it does halfway.
{
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
t0=$SECONDS
# KILN_SKIP_BUILD=1 runs the kiln already in $KILN_BUILD_DIR (a GPU machine that reaches no registry and
# gets its binaries built elsewhere: scripts/prebuilt-gpu.sh).
[ "${KILN_SKIP_BUILD:-0}" = 1 ] || "$root/scripts/build.sh"
kiln="${KILN_BUILD_DIR:-$root/build}/kiln"
cd "$root"
examples=(examples/*.json)
n=${#examples[@]}
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT

if "$kiln" doctor >"$tmp/doctor.txt" 2>&1; then
  echo "[run] $(grep -m1 '^GPU' "$tmp/doctor.txt" | sed 's/^GPU  */GPU: /'): tuning the $n examples into the plan store"
  names=(); rc=0
  for e in "${examples[@]}"; do
    name="$(basename "$e" .json)"; names+=("$name"); t=$SECONDS
    "$kiln" tune "$e" --use-store --json "$@" >"$tmp/tune-$name.json" 2>"$tmp/tune-$name.err"; echo $? >"$tmp/tune-$name.rc"
    echo "[tune] $name: exit $(cat "$tmp/tune-$name.rc") in $((SECONDS - t)) s$(grep -m1 -o 'kiln: .*' "$tmp/tune-$name.err" | sed 's/^/: /')"
    # A new process loads the stored plan and verifies it; another builds one from cuDNN's heuristics.
    "$kiln" run "$e" --use-store --verify >"$tmp/load-$name.txt" 2>&1; echo $? >"$tmp/load-$name.rc"
    "$kiln" run "$e" >"$tmp/build-$name.txt" 2>&1; echo $? >"$tmp/build-$name.rc"
  done
  "$kiln" plans ls
  python3 "$root/scripts/main_report.py" "$tmp" "${names[@]}" || rc=$?
  echo "[summary] tuned the $n examples into the plan store, reloaded and verified them in $((SECONDS - t0)) s"
  ((rc == 0)) || echo "[summary] some examples did not tune, load from the store or verify (marked above)"
  exit "$rc"
fi
why="$(grep -m1 '^kiln: ' "$tmp/doctor.txt" || true)"
if [[ "$why" != "kiln: Unavailable: no GPU"* ]]; then  # a GPU that does not work is not "no GPU"
  cat "$tmp/doctor.txt"; echo "[run] kiln doctor failed: fix the environment above (README: The GPU tier)"; exit 3
fi
why="${why#kiln: Unavailable: no GPU: }"; why="${why% (plans can still*}"
echo "[run] no GPU here ($why): compiling the $n examples ahead of time for the recorded H200" \
     "(profiles/h200.json) instead of tuning them"
rc=0
"$kiln" compile "${examples[@]}" --target profiles/h200.json "$@" 2>"$tmp/compile.err" | tee "$tmp/compile.out" || rc=$?
# 0: every graph compiled; 3: the others need a GPU (listed above, a result). Anything else is an error.
if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then cat "$tmp/compile.err"; exit "$rc"; fi
"$kiln" plans ls

compiled=(); need_gpu=()
while read -r name rest; do
  case "$rest" in
    *"needs a GPU:"*) need_gpu+=("$name");;
    *untuned) compiled+=("$name");;
  esac
done <"$tmp/compile.out"
store="$(sed -n 's/^compiled .* into //p' "$tmp/compile.out")"
join() { local IFS=,; echo "$*" | sed 's/,/, /g'; }
echo "[summary] compiled ${#compiled[@]} of $n examples for the H200 into $store (untuned)${compiled:+: $(join "${compiled[@]}")}"
if ((${#need_gpu[@]})); then
  echo "[summary] ${#need_gpu[@]} need a GPU to compile (reasons above): $(join "${need_gpu[@]}")"
  echo "[summary] on the GPU machine, scripts/run.sh (kiln tune --use-store) tunes all $n into the store"
fi
echo "[summary] done in $((SECONDS - t0)) s"
exit
}
