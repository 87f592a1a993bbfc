#!/usr/bin/env bash
# README command 2: set up, build, and run the whole test suite. The `gpu` tier is reported as skipped
# on a machine without a GPU (scripts/gpu-tier.sh runs it on one).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh"
build="${KILN_BUILD_DIR:-$root/build}"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 900
