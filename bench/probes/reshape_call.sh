#!/usr/bin/env bash
# One GPU call for issue 32's checks at a commit: build, kiln doctor (with the chain of plan sources), the GPU
# tier without the sweep. Logs in OUT.
#   bench/probes/reshape_call.sh OUT
set -uo pipefail
out="${1:?usage: reshape_call.sh OUT}"; mkdir -p "$out"
b=build-gpu
s=$SECONDS
cmake -S . -B $b -G Ninja >"$out/configure.log" 2>&1 && cmake --build $b -j16 >"$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$out/build.log" | head -30; exit 2; }
echo "built in $((SECONDS - s)) s"
$b/kiln doctor 2>&1 | grep -E "GPU |cuDNN \(loaded\)|driver|plan sources"
echo "## ctest -L gpu -E Sweep"
export KILN_EXPECT_GPU=1
s=$SECONDS
ctest --test-dir $b -L gpu -E Sweep --output-on-failure >"$out/ctest.log" 2>&1; echo "ctest exit $? in $((SECONDS - s)) s"
grep -E "tests passed|Total Test time|\(Failed\)|\(SEGFAULT\)|Skipped|Not Run" "$out/ctest.log" | head -20
grep -hE "^\[ planner \]" "$out/ctest.log" | cut -c1-300 | head -10
