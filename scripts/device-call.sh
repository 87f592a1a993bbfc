#!/usr/bin/env bash
# One device call's command (the workplace's `device` tool: $OUT comes back, at most 8 files): unpacks the carried
# pack (.prebuilt/p.tar.xz, from scripts/prebuilt-gpu.sh pack, compressed to travel) where it is not unpacked yet,
# runs scripts/prebuilt-gpu.sh run on the phases given, stopped at CALL_LIMIT seconds (default 540) so that what
# ran still comes back inside the call's limit, and returns it as $OUT/NAME.tar.xz (the stores and files over 8 MB
# left out) beside $OUT/NAME.txt, the printed log, and $OUT/pykiln.tar.xz when phase pybuild made a package.
#   bash scripts/device-call.sh NAME PHASE...     (env as scripts/prebuilt-gpu.sh reads it)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${1:?usage: scripts/device-call.sh NAME PHASE...}"; shift
: "${OUT:?OUT is the output folder of the device call}"
cd "$root"
if [ ! -f .prebuilt/manifest ] && [ -f .prebuilt/p.tar.xz ]; then (cd .prebuilt && xz -dc p.tar.xz | tar -xf -); fi
work="${TMPDIR:-/tmp}/kiln-call/$name"; rm -rf "$work"; mkdir -p "$work"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader; } \
  2>&1 | tee "$OUT/$name.txt"
timeout "${CALL_LIMIT:-540}" bash scripts/prebuilt-gpu.sh run "$work" "$@" 2>&1 | tee -a "$OUT/$name.txt"
rc=${PIPESTATUS[0]}
[ -f "$work/pykiln.tar.xz" ] && mv "$work/pykiln.tar.xz" "$OUT/"
find "$work" \( -name '*.db' -o -name '*.db-*' -o -size +8M \) -delete
tar -C "$work" -cJf "$OUT/$name.tar.xz" .
echo "call $name: exit $rc"
exit "$rc"
