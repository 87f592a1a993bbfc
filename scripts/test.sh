#!/usr/bin/env bash
# README command 2: set up, build, and run the whole test suite. `.ci/run` calls exactly this.
#  1. The normal build (${KILN_BUILD_DIR:-build}) and every test. The `gpu` tier is reported as skipped on
#     a machine without a GPU (scripts/gpu-tier.sh runs it on one, where a skip is a failure).
#  2. The host tier again under AddressSanitizer + UndefinedBehaviorSanitizer, from a separate build
#     (${KILN_SANITIZE_BUILD_DIR:-build-asan}, -DKILN_SANITIZE=ON, no benchmarks): `ctest -LE gpu`.
#     KILN_TEST_SANITIZE=0 leaves it out (a quicker local run); CI always runs it.
# Exits non-zero when either stage fails; both stages run even when the first fails.
set -euo pipefail
# The whole script is read before it runs (braces), so that editing or checking out a new version while
# it runs cannot change what it does halfway.
{
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_BUILD_DIR:-$root/build}"
asan_build="${KILN_SANITIZE_BUILD_DIR:-$root/build-asan}"
jobs="${KILN_BUILD_JOBS:-$(nproc)}"
t0=$SECONDS
elapsed() { local s=$((SECONDS - $1)); echo "$((s / 60))m$((s % 60))s"; }

results=()
rc=0
echo "[test] stage 1: build and run every test ($build)"
t=$SECONDS
if "$root/scripts/build.sh" && ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 900; then
  results+=("all tests (normal build): passed ($(elapsed $t))")
else
  results+=("all tests (normal build): FAILED ($(elapsed $t))"); rc=1
fi

if [ "${KILN_TEST_SANITIZE:-1}" != 0 ]; then
  echo "[test] stage 2: host tier under ASan + UBSan ($asan_build)"
  t=$SECONDS
  # protect_shadow_gap=0: the CUDA runtime maps memory where ASan's shadow gap would be (a GPU machine).
  # Leak checking stays on, less what NVIDIA's libraries keep for the process's life (tests/lsan.supp).
  # Any report fails the test that triggered it.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/tests/lsan.supp:print_suppressions=0}"
  if KILN_BUILD_DIR="$asan_build" "$root/scripts/build.sh" -DKILN_SANITIZE=ON -DKILN_BUILD_BENCHMARKS=OFF &&
     ctest --test-dir "$asan_build" -LE gpu --output-on-failure -j"$jobs" --timeout 1800; then
    results+=("host tier under ASan + UBSan: passed ($(elapsed $t))")
  else
    results+=("host tier under ASan + UBSan: FAILED ($(elapsed $t))"); rc=1
  fi
else
  results+=("host tier under ASan + UBSan: not run (KILN_TEST_SANITIZE=0)")
fi

echo "[test] summary ($(elapsed $t0)):"
printf '  %s\n' "${results[@]}"
exit $rc
}
