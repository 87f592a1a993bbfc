#!/usr/bin/env bash
# Runs Kiln's GPU test tier on a machine with a GPU: builds there, then `ctest -L gpu`.
#   scripts/gpu-tier.sh OUT_DIR [--sanitize] [--all] [--exclude REGEX]
# OUT_DIR receives configure/build logs, `kiln doctor --json`, the CTest log and JUnit XML, and with
# --sanitize one compute-sanitizer (memcheck) log per GPU test executable. --all runs the host tier too.
# --exclude REGEX leaves out the tests it matches (ctest -E: `--exclude Sweep` keeps the 600-spec sweep for a
# device call of its own).
# The machine needs no registry: third_party/ (made by scripts/setup.sh elsewhere) travels with the tree.
# A GPU is expected here: KILN_EXPECT_GPU=1 makes every GPU test that would skip for want of one fail, and
# the tier fails (exit 1) when `kiln doctor` fails, a test fails, no `gpu` test ran, or any `gpu` test was
# skipped, so a broken driver can never pass as "100% passed, all skipped".
# cuDNN is taken from python3's site-packages when it has one (FindCUDNN.cmake); `kiln doctor` checks
# that the loaded library is the one the headers describe.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/gpu-tier.sh OUT_DIR [--sanitize] [--all] [--exclude REGEX]}"; shift
sanitize=0; all=0; exclude=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) sanitize=1;;
    --all) all=1;;
    --exclude) [ $# -ge 2 ] && [ -n "$2" ] || { echo "--exclude needs a REGEX" >&2; exit 2; }; exclude=(-E "$2"); shift;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
  shift
done
mkdir -p "$out"; out="$(cd "$out" && pwd)"
build="${KILN_GPU_BUILD_DIR:-$root/build-gpu}"
cd "$root"
[ -f third_party/cudnn_frontend/include/cudnn_frontend.h ] || { echo "third_party/ missing: run scripts/setup.sh where a registry is reachable and carry it" >&2; exit 3; }
cmake -S . -B "$build" -G Ninja -DKILN_BUILD_BENCHMARKS=ON >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 3; }
grep -E "cuDNN" "$out/configure.log"
cmake --build "$build" -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -40; exit 2; }
export KILN_EXPECT_GPU=1
rc=0
"$build/kiln" doctor --json >"$out/doctor.json"; d=$?; echo "kiln doctor exit code: $d"; cat "$out/doctor.json"
[ $d -eq 0 ] || { echo "FAIL: kiln doctor exit $d: no usable GPU where one is expected"; rc=1; }
labels=(-L gpu); [ "$all" = 1 ] && labels=()
ctest --test-dir "$build" "${labels[@]}" "${exclude[@]}" --output-on-failure --output-junit "$out/ctest.xml" 2>&1 | tee "$out/ctest.log"
c=${PIPESTATUS[0]}; [ $c -eq 0 ] || { echo "FAIL: ctest exit $c"; rc=1; }
# CTest counts a skipped test as not failed: a skipped or missing `gpu` test fails the tier here.
ran=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: [a-z_]+\.gpu\.' "$out/ctest.log")
skipped=$(grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: [a-z_]+\.gpu\.' "$out/ctest.log" | grep -c 'Skipped')
[ "$ran" -gt 0 ] || { echo "FAIL: no gpu test ran"; rc=1; }
[ "$skipped" -eq 0 ] || { echo "FAIL: $skipped of $ran gpu tests were skipped (a GPU is expected here):"
  grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: [a-z_]+\.gpu\..*Skipped' "$out/ctest.log"; rc=1; }
if [ "$sanitize" = 1 ]; then
  # memcheck on each GPU test binary (KILN_SANITIZE_BINARIES: a subset, e.g. "validate_gpu_test lower_gpu_test";
  # KILN_SANITIZE_FILTER: a gtest filter, since cuDNN's kernels under memcheck are slow), racecheck on the
  # references' own kernels (validate_gpu_test).
  bins=(); for b in ${KILN_SANITIZE_BINARIES:-}; do bins+=("$build/tests/$b"); done
  [ ${#bins[@]} -gt 0 ] || bins=("$build"/tests/*_gpu_test)
  filter=(); [ -n "${KILN_SANITIZE_FILTER:-}" ] && filter=(--gtest_filter="$KILN_SANITIZE_FILTER")
  for exe in "${bins[@]}"; do
    name="$(basename "$exe")"
    [ -x "$exe" ] || { echo "FAIL: no test binary $exe"; rc=1; continue; }
    compute-sanitizer --tool memcheck --error-exitcode 99 "$exe" "${filter[@]}" >"$out/memcheck-$name.log" 2>&1
    s=$?; echo "memcheck $name: exit $s: $(grep -E 'ERROR SUMMARY' "$out/memcheck-$name.log" | tail -1)"
    [ $s -ne 0 ] && { echo "FAIL: memcheck $name exit $s"; rc=1; }
  done
  exe="$build/tests/validate_gpu_test"
  compute-sanitizer --tool racecheck --error-exitcode 99 "$exe" >"$out/racecheck-validate_gpu_test.log" 2>&1
  s=$?; echo "racecheck validate_gpu_test: exit $s: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$out/racecheck-validate_gpu_test.log" | tail -1)"
  [ $s -ne 0 ] && { echo "FAIL: racecheck validate_gpu_test exit $s"; rc=1; }
fi
echo "gpu tier: $([ $rc -eq 0 ] && echo PASSED || echo FAILED) ($ran gpu tests ran, $skipped skipped)"
exit $rc
