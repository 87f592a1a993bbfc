#!/usr/bin/env bash
# One GPU call for issue 31's checks at a commit: build, the extent and fan-out cases through `kiln run`,
# the GPU tier without the sweep, then the sweep (600 seeded specs) and its regression specs. Logs in OUT.
#   bench/probes/final_call.sh OUT
set -uo pipefail
out="${1:?usage: final_call.sh OUT}"; mkdir -p "$out"
b=build-gpu
s=$SECONDS
cmake -S . -B $b -G Ninja >"$out/configure.log" 2>&1 && cmake --build $b -j16 >"$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$out/build.log" | head -30; exit 2; }
echo "built in $((SECONDS - s)) s"
$b/kiln doctor 2>&1 | grep -E "GPU |cuDNN \(loaded\)|driver"
echo "## extent and fan-out cases (kiln run, first-use verification on)"
bash bench/probes/extent_probe.sh $b/kiln /tmp/ep relu_bf16_1x2p30m64 relu_fp32_1x2p29 relu_bf16_1x2p29
bash bench/probes/row_probe.sh $b/kiln /tmp/rp 2>&1 | sed -n '4,6p;10,11p'
printf '{"name": "relu_prime_row", "io_dtype": "bf16", "tensors": {"x": {"dims": [1, 2147483647]}}, "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]}\n' >/tmp/prime.json
$b/kiln run /tmp/prime.json >/tmp/prime.log 2>&1; echo "relu [1, 2^31-1] bf16: exit $? $(tail -1 /tmp/prime.log | cut -c1-300)"
for f in tests/sweep/regressions/fan_out_51_outputs.json bench/probes/tree51.json; do
  $b/kiln run --verify "$f" >/tmp/fo.log 2>&1; echo "$f: exit $?, $(grep -c Passed /tmp/fo.log) outputs Passed"; done
echo "## ctest -L gpu -E Sweep"
export KILN_EXPECT_GPU=1
ctest --test-dir $b -L gpu -E Sweep --output-on-failure >"$out/ctest.log" 2>&1; echo "ctest exit $?"
grep -E "tests passed|Total Test time|\(Failed\)|\(SEGFAULT\)|Skipped" "$out/ctest.log" | head -20
grep -hE "^\[ (first use|defect|canonical) \]" "$out/ctest.log" | cut -c1-400
echo "## sweep"
KILN_SWEEP_REPORT="$out/sweep.json" $b/tests/runtime_gpu_test --gtest_filter='Sweep.*' >"$out/sweep.log" 2>&1; echo "sweep exit $?"
grep -E "^\[ sweep \]|^\[ regression \]|OK \]|FAILED" "$out/sweep.log" | cut -c1-300
