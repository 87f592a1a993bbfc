#!/usr/bin/env bash
# Builds one of tests/layering's EXCLUDE_FROM_ALL targets in Kiln's build tree and checks the outcome:
#   check.sh BUILD_DIR TARGET ok
#   check.sh BUILD_DIR TARGET fails HEADER
# `ok` passes when the build succeeds. `fails` passes only when the build fails AND the compiler's error
# names HEADER as not found ("HEADER: No such file or directory", GCC and clang alike), so that a failure
# for another reason (a syntax error, a broken build tree) does not count as the layers being enforced.
# Exit 0 pass, 1 fail, 2 bad usage.
set -uo pipefail
if [ $# -lt 3 ] || { [ "$3" = fails ] && [ $# -ne 4 ]; } || { [ "$3" != ok ] && [ "$3" != fails ]; }; then
  echo "usage: check.sh BUILD_DIR TARGET ok | check.sh BUILD_DIR TARGET fails HEADER" >&2
  exit 2
fi
build=$1 target=$2 expect=$3 header=${4:-}
out=$(cmake --build "$build" --target "$target" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -v '^\[[0-9]*/[0-9]*\] ' | tail -20
if [ "$expect" = ok ]; then
  if [ $rc -eq 0 ]; then echo "PASS: $target builds"; exit 0; fi
  echo "FAIL: $target should build (an allowed include) but the build exited $rc"; exit 1
fi
if [ $rc -eq 0 ]; then
  echo "FAIL: $target built, but it includes $header, a header of a layer it may not use"; exit 1
fi
if printf '%s\n' "$out" | grep -qF "$header: No such file or directory"; then
  echo "PASS: $target does not compile: $header is not on its include path"; exit 0
fi
echo "FAIL: the build of $target failed (exit $rc), but not because $header was not found"; exit 1
