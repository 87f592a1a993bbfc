#!/usr/bin/env bash
# README command 2: set up, build, and run the whole test suite. `.ci/run` calls exactly this.
#  1. The normal build (${KILN_BUILD_DIR:-build}) and every test: CTest's, then the Python package's host suite
#     (python/tests with pytest, against the extension the same build made; stage "python tests"). The `gpu`
#     tier is reported as skipped on a machine without a GPU (scripts/gpu-tier.sh runs it on one, where a skip
#     is a failure; scripts/prebuilt-gpu.sh's `python` phase runs the Python GPU suite).
#     Once the build has succeeded, and before any test, a private PostgreSQL server is started in a fresh
#     temp folder (stage `postgres`: scripts/postgres.sh start) for the PostgreSQL plan store's tests (CTest
#     label `postgres`); both test tiers see it as KILN_TEST_POSTGRES (the libpq connection string) and
#     KILN_TEST_POSTGRES_DATA (the folder), and it is stopped and removed when this script exits, however.
#     A server that does not start fails the stage, and the tests run all the same (the PostgreSQL ones then
#     fail where CI is set, and skip elsewhere). KILN_TEST_POSTGRES already set: that server is used, none started.
#  2. The C++ API as an application sees it: `cmake --install` of that build into $build/install, then
#     examples/cpp configured with find_package(kiln) against it ($build/example-cpp), built and run on
#     examples/small/conv_bias_relu.json: exit 0 with a GPU (`kiln doctor` passes), else exit 3 and its
#     "cannot plan on this machine" message. Not run when the build failed.
#  3. The host tier again under AddressSanitizer + UndefinedBehaviorSanitizer, from a separate build
#     (${KILN_SANITIZE_BUILD_DIR:-build-asan}, -DKILN_SANITIZE=ON, no benchmarks): `ctest -LE gpu`.
#     KILN_TEST_SANITIZE=0 leaves it out (a quicker local run); CI always runs it.
#  4. The source format: `scripts/format.sh --check` (clang-format 14, which scripts/setup.sh installs, and
#     .clang-format) lists the files that `bash scripts/format.sh` would change.
# Each stage's wall time is printed as it ends ("[time] NAME: 1m23s") and again in the summary: setup, build,
# postgres, tests, install + example, sanitizer build, sanitizer tier, format (docs/contributing.md "Build
# cost" says what each costs on a 2-core machine).
# Exits non-zero when any stage fails; every stage runs even when an earlier one fails.
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
times=()
rc=0
# Free space where the builds go: printed at the start and after a failed stage. The two builds take ~4 GB with
# their debug info compressed (docs/contributing.md "Build cost"); a disk that fills cuts a stage off mid-line.
free_kb() { df -Pk "$root" 2>/dev/null | awk 'NR==2 {print $4}'; }
disk_free() { free_kb | awk '{printf "%.1f GB free under the checkout", $1/1048576}'; }
# timed NAME COMMAND...: runs COMMAND, prints and records its wall time; returns its exit status.
timed() {
  local name=$1 t=$SECONDS r=0; shift
  "$@" || r=$?
  times+=("$(printf '%-18s %s' "$name" "$(elapsed $t)")")
  echo "[time] $name: $(elapsed $t)$([ $r = 0 ] || echo " (failed, exit $r; $(disk_free))")"
  return $r
}

# not_run NAME: a stage an earlier failure kept from running still has its row.
not_run() { times+=("$(printf '%-18s %s' "$1" "not run")"); }

# The tests' PostgreSQL server: started once (postgres_stage), by the first test tier whose build succeeded,
# and stopped, its folder removed, when the script exits, also after a failed stage or an interrupt.
pg_dir=""
pg_tried=0
start_postgres() {
  local conninfo
  pg_dir="$(mktemp -d /tmp/kiln-pg.XXXXXX)" || return 1
  chmod 755 "$pg_dir" || return 1  # the server's own user (kiln-pg, when we are root) must reach it
  conninfo="$("$root/scripts/postgres.sh" start "$pg_dir")" || return 1
  export KILN_TEST_POSTGRES="$conninfo" KILN_TEST_POSTGRES_DATA="$pg_dir"
}
postgres_stage() {
  [ "$pg_tried" = 0 ] || return 0
  pg_tried=1
  if [ -n "${KILN_TEST_POSTGRES:-}" ]; then
    echo "[test] PostgreSQL: KILN_TEST_POSTGRES is set ($KILN_TEST_POSTGRES): using it, starting none"
    return 0
  fi
  if timed postgres start_postgres; then
    echo "[test] PostgreSQL: $KILN_TEST_POSTGRES"
  else
    results+=("PostgreSQL server for the tests: FAILED to start (above); the PostgreSQL tests will fail"); rc=1
  fi
}
stop_postgres() {
  [ -n "$pg_dir" ] || return 0
  "$root/scripts/postgres.sh" stop "$pg_dir" || true
  rm -rf "$pg_dir"
}
trap stop_postgres EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The Python package's suite (python/tests, pytest) against the extension this build made ($build/python): the host
# tests run, the GPU suite (python/tests/gpu) skips without torch and a GPU. Any failure fails the stage.
python_tests() {
  local py="$root/third_party/python/bin/python"
  if [ ! -d "$build/python/kiln" ]; then echo "[python] no $build/python/kiln: the build made no extension"; return 1; fi
  PYTHONPATH="$build/python" KILN_CLI="$build/kiln" "$py" -m pytest -q -p no:cacheprovider -rs "$root/python/tests" \
    2>&1 | sed 's/^/[python] /'
  return "${PIPESTATUS[0]}"
}

echo "[test] disk: $(disk_free)"
if [ "$(free_kb)" -lt $((8 * 1048576)) ] 2>/dev/null; then
  echo "[test] WARNING: under 8 GB free: the builds and their tests may fill the disk and fail mid-stage"
fi
echo "[test] stage 1: build and run every test ($build)"
t=$SECONDS
built=0
passed=0
# Set-up is its own stage; the builds below skip theirs (KILN_SKIP_SETUP) so that it is counted once.
if timed setup "$root/scripts/setup.sh"; then
  if KILN_SKIP_SETUP=1 timed build "$root/scripts/build.sh"; then
    built=1
    postgres_stage
    timed tests ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 900 && passed=1
    timed "python tests" python_tests || passed=0
  else
    not_run tests; not_run "python tests"
  fi
else
  not_run build; not_run tests; not_run "python tests"
fi
if [ "$passed" = 1 ]; then
  results+=("all tests (normal build): passed ($(elapsed $t))")
else
  results+=("all tests (normal build): FAILED ($(elapsed $t))"); rc=1
fi

# step NAME LOG COMMAND...: runs COMMAND with its output in LOG, shown (the tail) only when it fails.
step() {
  local name=$1 log=$2; shift 2
  "$@" >"$log" 2>&1 && return 0
  tail -30 "$log"; echo "[example] $name FAILED (log: $log)"; return 1
}
# Installs the build, then configures, builds and runs examples/cpp against the installed package.
example_cpp() {
  local prefix="$build/install" ex="$build/example-cpp" spec="$root/examples/small/conv_bias_relu.json"
  local out want=3 got=0
  rm -rf "$prefix" "$ex"  # nothing left from an earlier install (a header since removed)
  mkdir -p "$ex"
  step install "$build/install.log" cmake --install "$build" --prefix "$prefix" || return 1
  step configure "$ex/configure.log" cmake -S "$root/examples/cpp" -B "$ex" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" ||
    return 1
  step build "$ex/build.log" cmake --build "$ex" || return 1
  if "$build/kiln" doctor >/dev/null 2>&1; then want=0; fi
  out="$("$ex/kiln_example" "$spec" 2>&1)" || got=$?
  printf '%s\n' "$out" | sed 's/^/[example] /'
  if [ "$got" != "$want" ]; then echo "[example] exit $got, expected $want"; return 1; fi
  if [ "$want" = 3 ] && [[ "$out" != *"cannot plan on this machine"* ]]; then
    echo "[example] exit 3 without the no-GPU message"; return 1
  fi
  example_result="exit $got, $([ "$want" = 0 ] && echo "ran on the GPU" || echo "no GPU")"
}

echo "[test] stage 2: install, and build and run examples/cpp against the installed package ($build/install)"
t=$SECONDS
example_result=""
if [ "$built" = 0 ]; then
  results+=("C++ example against the install: not run (the build failed)"); rc=1; not_run "install + example"
elif timed "install + example" example_cpp; then
  results+=("C++ example against the install: passed, $example_result ($(elapsed $t))")
else
  results+=("C++ example against the install: FAILED ($(elapsed $t))"); rc=1
fi

if [ "${KILN_TEST_SANITIZE:-1}" != 0 ]; then
  echo "[test] stage 3: host tier under ASan + UBSan ($asan_build)"
  t=$SECONDS
  # protect_shadow_gap=0: the CUDA runtime maps memory where ASan's shadow gap would be (a GPU machine).
  # Leak checking stays on, less what NVIDIA's libraries keep for the process's life (tests/lsan.supp).
  # Any report fails the test that triggered it.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/tests/lsan.supp:print_suppressions=0}"
  san_ok=0
  if KILN_BUILD_DIR="$asan_build" KILN_SKIP_SETUP=1 timed "sanitizer build" "$root/scripts/build.sh" \
       -DKILN_SANITIZE=ON -DKILN_BUILD_BENCHMARKS=OFF -DKILN_BUILD_PYTHON=OFF; then
    postgres_stage  # started already, unless the normal build failed
    timed "sanitizer tier" ctest --test-dir "$asan_build" -LE gpu --output-on-failure -j"$jobs" --timeout 1800 &&
      san_ok=1
  else
    not_run "sanitizer tier"
  fi
  if [ "$san_ok" = 1 ]; then
    results+=("host tier under ASan + UBSan: passed ($(elapsed $t))")
  else
    results+=("host tier under ASan + UBSan: FAILED ($(elapsed $t))"); rc=1
  fi
else
  results+=("host tier under ASan + UBSan: not run (KILN_TEST_SANITIZE=0)")
fi

echo "[test] stage 4: source format (scripts/format.sh --check)"
t=$SECONDS
if timed format "$root/scripts/format.sh" --check; then
  results+=("source format: passed ($(elapsed $t))")
else
  results+=("source format: FAILED (above; 'bash scripts/format.sh' formats the tree) ($(elapsed $t))"); rc=1
fi

echo "[test] summary ($(elapsed $t0)):"
printf '  %s\n' "${results[@]}"
echo "[test] wall time per stage:"
printf '  %s\n' "${times[@]}" "$(printf '%-18s %s' total "$(elapsed $t0)")"
exit $rc
}
