#!/usr/bin/env bash
# Host tier: a GPU test binary run where it finds no usable GPU
#  - skips every case and exits 0 when no GPU is expected (CPU-only machines, CI);
#  - fails, naming KILN_EXPECT_GPU and the reason, when KILN_EXPECT_GPU=1 (set by scripts/gpu-tier.sh).
# The binary never sees a GPU here: a host test does not touch one (CUDA_VISIBLE_DEVICES= hides them all), so
# the check holds on a machine with a GPU too. Should a GPU be usable all the same, there is nothing to check
# (exit 77: CTest reports it skipped).
#   tests/expect_gpu_check.sh GPU_TEST_BINARY
set -u
export CUDA_VISIBLE_DEVICES=
bin="${1:?usage: expect_gpu_check.sh GPU_TEST_BINARY}"
fail() { echo "FAIL: $*"; exit 1; }

out="$(env -u KILN_EXPECT_GPU "$bin" 2>&1)"; rc=$?
total="$(sed -n 's/^\[==========\] \([0-9]*\) tests\? from .* ran\..*/\1/p' <<<"$out")"
skipped="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?, listed below:.*/\1/p' <<<"$out")"
if [ -z "$skipped" ]; then
  [ "$rc" = 0 ] || { echo "$out" | tail -40; fail "$bin failed without KILN_EXPECT_GPU (exit $rc)"; }
  echo "a GPU is usable here: nothing skips, so there is nothing to check"; exit 77
fi
[ "$rc" = 0 ] || { echo "$out" | tail -40; fail "without KILN_EXPECT_GPU: exit $rc, expected 0 (skips are not failures)"; }
[ -n "$total" ] && [ "$total" -gt 0 ] || fail "no test ran: $out"
[ "$skipped" = "$total" ] || fail "without a GPU, $skipped of $total tests skipped; expected all"
grep -q "no usable CUDA device" <<<"$out" || fail "the skip does not say why"
echo "without KILN_EXPECT_GPU: exit 0, $skipped of $total skipped"

for v in 0 ""; do  # "0" and "" mean not expected
  KILN_EXPECT_GPU="$v" "$bin" >/dev/null 2>&1 || fail "KILN_EXPECT_GPU='$v' made a skip a failure"
done

out="$(KILN_EXPECT_GPU=1 "$bin" 2>&1)"; rc=$?
[ "$rc" != 0 ] || { echo "$out" | tail -40; fail "with KILN_EXPECT_GPU=1 and no GPU, $bin exited 0"; }
failed="$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\?, listed below:.*/\1/p' <<<"$out")"
[ "$failed" = "$total" ] || fail "with KILN_EXPECT_GPU=1, $failed of $total tests failed; expected all"
grep -q "KILN_EXPECT_GPU is set, so this test may not skip, but: no usable CUDA device: " <<<"$out" ||
  fail "the failure does not name KILN_EXPECT_GPU and the reason: $(grep -m3 -A2 'Failure' <<<"$out")"
grep -q '^\[  SKIPPED \]' <<<"$out" && fail "with KILN_EXPECT_GPU=1, a test still skipped"
echo "with KILN_EXPECT_GPU=1: exit $rc, $failed of $total failed: $(grep -m1 'KILN_EXPECT_GPU is set' <<<"$out")"
