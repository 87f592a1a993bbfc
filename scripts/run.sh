#!/usr/bin/env bash
# README command 1: set up, build, and run Kiln's main job on the embedded default: the shipped example
# graphs baked into the local SQLite plan store ($KILN_STORE, default ~/.cache/kiln/plans.db).
#  - With a GPU: `kiln tune` every example (every engine configuration timed and checked) into the store.
#  - Without one: `kiln compile` them ahead of time for the recorded H200 (profiles/h200.json), untuned,
#    so the GPU machine loads them at start or tunes them in place (`kiln tune --store S --untuned`).
# Then lists the store.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh" >/dev/null
kiln="${KILN_BUILD_DIR:-$root/build}/kiln"
cd "$root"
if "$kiln" doctor; then
  "$kiln" tune examples/*.json --use-store "$@"
else
  echo "(no GPU here: compiling plans ahead of time for the recorded H200)"
  "$kiln" compile examples/*.json --target profiles/h200.json "$@"
fi
"$kiln" plans ls
