#!/usr/bin/env bash
# Runs Kiln's GPU test tier on a machine with a GPU: builds there, then `ctest -L gpu`.
#   scripts/gpu-tier.sh OUT_DIR [--sanitize] [--all]
# OUT_DIR receives configure/build logs, `kiln doctor --json`, the CTest log and JUnit XML, and with
# --sanitize one compute-sanitizer (memcheck) log per GPU test executable. --all runs the host tier too.
# The machine needs no registry: third_party/ (made by scripts/setup.sh elsewhere) travels with the tree.
# cuDNN is taken from python3's site-packages when it has one (FindCUDNN.cmake); `kiln doctor` checks
# that the loaded library is the one the headers describe.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/gpu-tier.sh OUT_DIR [--sanitize] [--all]}"; shift
sanitize=0; all=0
for a in "$@"; do case "$a" in --sanitize) sanitize=1;; --all) all=1;; *) echo "unknown option $a" >&2; exit 2;; esac; done
mkdir -p "$out"; out="$(cd "$out" && pwd)"
build="${KILN_GPU_BUILD_DIR:-$root/build-gpu}"
cd "$root"
[ -f third_party/cudnn_frontend/include/cudnn_frontend.h ] || { echo "third_party/ missing: run scripts/setup.sh where a registry is reachable and carry it" >&2; exit 3; }
cmake -S . -B "$build" -G Ninja -DKILN_BUILD_BENCHMARKS=ON >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 3; }
grep -E "cuDNN" "$out/configure.log"
cmake --build "$build" -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -40; exit 2; }
"$build/kiln" doctor --json >"$out/doctor.json"; echo "kiln doctor exit code: $?"; cat "$out/doctor.json"
labels=(-L gpu); [ "$all" = 1 ] && labels=()
ctest --test-dir "$build" "${labels[@]}" --output-on-failure --output-junit "$out/ctest.xml" 2>&1 | tee "$out/ctest.log"
rc=${PIPESTATUS[0]}
if [ "$sanitize" = 1 ]; then
  for exe in "$build"/*_gpu_test; do
    name="$(basename "$exe")"
    compute-sanitizer --tool memcheck --error-exitcode 99 "$exe" >"$out/memcheck-$name.log" 2>&1
    s=$?; echo "memcheck $name: exit $s ($(grep -c 'ERROR SUMMARY: 0 errors' "$out/memcheck-$name.log") clean summaries)"
    [ $s -ne 0 ] && rc=1
  done
fi
exit $rc
