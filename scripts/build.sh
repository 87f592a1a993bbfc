#!/usr/bin/env bash
# Configures and builds Kiln into ${KILN_BUILD_DIR:-build} (set-up first, so a fresh clone needs nothing else).
# Extra arguments go to CMake's configure step (e.g. -DKILN_SANITIZE=ON). Prints one line per stage and a
# compact progress indication (every tenth of the build), never the hundreds of per-file lines; a
# compiler error is printed whole. With nothing changed it takes seconds.
#   KILN_BUILD_JOBS  parallel jobs (default: the number of cores)
#   KILN_SKIP_SETUP  1: do not run scripts/setup.sh first (a caller that just ran it)
#   KILN_CCACHE      0: compile without ccache even where it is installed (default: use it when present). Its
#                    cache lies outside the checkout (ccache's default, ~/.cache/ccache, or $CCACHE_DIR), so a
#                    fresh clone at the same path (as CI makes) or a removed build folder recompiles little.
#                    Objects carry absolute paths (debug info, the unity units, the tests' KILN_SOURCE_DIR):
#                    a checkout at another path misses.
set -euo pipefail
# The whole script is read before it runs (braces), so that editing or checking out a new version while
# it runs cannot change what it does halfway.
{
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_BUILD_DIR:-$root/build}"
jobs="${KILN_BUILD_JOBS:-$(nproc)}"
elapsed() { local s=$((SECONDS - $1)); if ((s >= 60)); then echo "$((s / 60))m$((s % 60))s"; else echo "${s}s"; fi; }

t=$SECONDS
[ "${KILN_SKIP_SETUP:-0}" = 1 ] || "$root/scripts/setup.sh"  # scripts/test.sh runs it once, as its own stage

t=$SECONDS
mkdir -p "$build"
launcher=()
if [ "${KILN_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
else
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=)  # also clears a launcher an earlier configure left in the cache
fi
# The Python extension (python/) builds with the rest when setup made its venv; a later -DKILN_BUILD_PYTHON=OFF in
# "$@" wins (the sanitizer build).
py_args=()
if [ -x "$root/third_party/python/bin/python" ]; then
  py_args=(-DKILN_BUILD_PYTHON=ON "-DPython_EXECUTABLE=$root/third_party/python/bin/python")
fi
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "${py_args[@]}" "$@" \
  >"$build/configure.log" 2>&1; then
  tail -30 "$build/configure.log"; echo "[configure] FAILED (full log: $build/configure.log)"; exit 1
fi
cc_note="no ccache"; [ "${launcher[0]}" = -DCMAKE_CXX_COMPILER_LAUNCHER= ] || cc_note="ccache"
echo "[configure] $build ($(elapsed $t), $cc_note; log: $build/configure.log)"

# Ninja prints one "[done/total] description" line per step when its output is not a terminal: keep the
# first, one per tenth of the build, one a minute at most otherwise, and the last; and everything else
# (compiler diagnostics, errors).
t=$SECONDS
echo "[build] $jobs jobs"
progress() {  # reads ninja's output line by line (awk implementations may buffer a pipe)
  local line n total tenth last=-1 what uptodate=0 shown=$SECONDS
  while IFS= read -r line; do
    if [[ "$line" =~ ^\[([0-9]+)/([0-9]+)\]\ (.*)$ ]]; then
      n=${BASH_REMATCH[1]}; total=${BASH_REMATCH[2]}; what=${BASH_REMATCH[3]}
      ((n > 0)) || continue  # CMake re-checking its globs before the build proper
      tenth=$((10 * n / total))
      if ((n == 1 || tenth > last || n == total || SECONDS - shown >= 60)); then
        last=$tenth; shown=$SECONDS
        what="${what/CMakeFiles\/*.dir\//}"; ((${#what} <= 70)) || what="${what:0:67}..."
        printf '[build] %3d%% %d/%d %s (%s)\n' $((100 * n / total)) "$n" "$total" "$what" "$(elapsed $t)"
      fi
    elif [[ "$line" == "ninja: no work to do." ]]; then uptodate=1
    elif [[ "$line" != "-- "* ]]; then printf '%s\n' "$line"  # diagnostics; not CMake re-running itself
    fi
  done
  ((uptodate == 0)) || echo "[build] up to date"
}
set +e
cmake --build "$build" -j"$jobs" 2>&1 | progress
rc=("${PIPESTATUS[@]}")
set -e
if ((rc[0] != 0)); then echo "[build] FAILED after $(elapsed $t) (exit ${rc[0]})"; exit "${rc[0]}"; fi
((rc[1] == 0)) || { echo "[build] the progress filter failed (exit ${rc[1]})"; exit "${rc[1]}"; }
echo "[build] done in $(elapsed $t): $build"
exit
}
