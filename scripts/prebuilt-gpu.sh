#!/usr/bin/env bash
# The GPU checks from binaries built on another machine, for a device call too short to build there.
#   scripts/prebuilt-gpu.sh pack BUILD_DIR [--python-from TAR]
#                                                     here: kiln and every *_gpu_test of BUILD_DIR, stripped,
#                                                     into .prebuilt/ (ignored; name it in the call's carry);
#                                                     TAR: a Python package that phase pybuild brought back
#   scripts/prebuilt-gpu.sh run OUT_DIR [PHASE...]    there: PHASE doctor tests bench examples runtime planner
#                                                     capture mainjob gputier shadow fleet python pybench
#                                                     pyprofile rerun fe123 (fe123: the 1.23 -> 1.32 upgrade report)
#                                                     replayshadow attn (issue 36: attention's band variants)
#                                                     attnbwd (issue 36: the attention backward pass against
#                                                     PyTorch's SDPA backends; env KILN_ATTNBWD_SEQS,
#                                                     KILN_ATTNBWD_FP8=1 adds the FP8 backward pass)
#                                                     attnfp8 (issue 36: FP8 attention's forward against the
#                                                     bf16 one; env KILN_ATTNFP8_SEQS, KILN_ATTNFP8_TOKENS)
#                                                     attndropout (issue 36: dropout in training against
#                                                     PyTorch's backends; env KILN_ATTNDROPOUT_SEQS)
#                                                     attnprefill (issue 36: ragged prefill against PyTorch on
#                                                     the padded batch; env KILN_ATTNPREFILL_SEQS)
#                                                     attndecode (issue 36: decode over paged caches against
#                                                     PyTorch on padded dense K/V; env KILN_ATTNDECODE_BATCHES,
#                                                     KILN_ATTNDECODE_CTXS)
#                                                     tunewall (issue 37: kiln tune walls with and without build
#                                                     helpers; env KILN_TUNEWALL_IDS, KILN_TUNEWALL_HELPERS)
#                                                     helpers (the build helpers' GPU test) buildscale (the probe:
#                                                     KILN_BUILDSCALE_PROCS tunes side by side, --no-isolate)
#                                                     pybuild (the Python package built there, in the background,
#                                                     for its Python and torch; carry third_party/ but its python/)
#                                                     gfilter (KILN_GTEST_BIN, KILN_GTEST_FILTER, KILN_GTEST_TIMEOUT;
#                                                     KILN_GTEST_MORE="BIN=FILTER ..." runs more binaries after it)
#                                                     ncuprof (issue 37: Nsight Compute on a case's Kiln plans and PyTorch peer;
#                                                     env KILN_NCU_IDS) settleab (the timer's settle time, 0 against 100 us,
#                                                     on pinned plans; env KILN_SETTLE_IDS, KILN_SETTLE_PINS)
#                                                     coldprof deserprof preloadmany fp8probe (issue 37: a stored plan's start, driver
#                                                     call by call; the FP8/AMAX graphs against their plain GEMMs)
#                                                     (default: all but mainjob, gputier, shadow, fleet,
#                                                     python and pybench, in that order), or
#                                                     suite:PART (bench/run_suite.sh's conv, gemm, attention,
#                                                     block, runtime; its files under OUT_DIR/suite)
# The test binaries name the source and build folders they were built in (KILN_SOURCE_DIR, KILN_BINARY):
# `run` links the recorded source folder to this checkout and puts the binaries back where they were built,
# so those paths hold there too. cuDNN comes from python3's site-packages (the PyTorch venv), never from the
# system folder; `kiln doctor` says which library was loaded. Binaries are linked with libstdc++ and
# libgcc static (-DKILN_STATIC_RUNTIME=ON), so only glibc, the driver, NVRTC and cuDNN come from the machine.
# Every phase writes its log under OUT_DIR as it goes, so a call stopped at its limit returns what ran.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="${1:?usage: scripts/prebuilt-gpu.sh pack BUILD_DIR | run OUT_DIR [PHASE...]}"; shift
pre="$root/.prebuilt"
case "$mode" in
  pack)
    build="$(cd "${1:?pack needs BUILD_DIR}" && pwd)"; pyfrom="${2:-}"  # pack BUILD_DIR [--python-from TAR]
    [ "$pyfrom" = --python-from ] && pyfrom="$(cd "$(dirname "${3:?--python-from needs TAR}")" && pwd)/$(basename "$3")"
    rm -rf "$pre"; mkdir -p "$pre"
    cp "$build/kiln" "$pre/"
    cp "$build"/tests/*_gpu_test "$pre/" 2>/dev/null
    cp "$build"/benchmarks/planner_cold_start "$pre/" 2>/dev/null
    cp "$build"/benchmarks/capture_bench "$pre/" 2>/dev/null
    for b in block_bench plan_load_bench shadow_bench plan_deserialize_profile libkiln_api_trace.so; do
      cp "$build/benchmarks/$b" "$pre/" 2>/dev/null
    done
    # A kiln built on the previous cuDNN Frontend (KILN_OLD_FRONTEND_BUILD, e.g. a build of
    # -DKILN_CUDNN_FRONTEND_DIR=third_party/cudnn_frontend-1.23.0): the phase fe123's "before".
    [ -n "${KILN_OLD_FRONTEND_BUILD:-}" ] && cp "$KILN_OLD_FRONTEND_BUILD/kiln" "$pre/kiln-old-frontend"
    strip --strip-debug "$pre"/*
    # This machine's cuDNN folder, baked in as RPATH, would win over LD_LIBRARY_PATH there: drop it, so the
    # machine's own cuDNN (the venv's, set below) is the one loaded.
    command -v patchelf >/dev/null || { echo "pack needs patchelf (apt-get install patchelf)" >&2; exit 3; }
    for f in "$pre"/*; do patchelf --remove-rpath "$f"; done
    # The Python package (a build configured with -DKILN_BUILD_PYTHON=ON for the machine's Python, 3.12 there): the
    # extension finds the libsqlite3 carried beside it ($ORIGIN) and the venv's cuDNN (kiln/_preload.py).
    if [ -d "$build/python/kiln" ]; then
      mkdir -p "$pre/python"; cp -r "$build/python/kiln" "$pre/python/"; rm -rf "$pre/python/kiln/__pycache__"
      for so in "$pre"/python/kiln/_kiln*.so; do strip --strip-debug "$so"; patchelf --set-rpath '$ORIGIN' "$so"; done
      # kiln._torch_native (built with KILN_TORCH_PYTHON naming a torch of the GPU venv's version) needs no rpath:
      # `import torch` has loaded its libraries.
      for so in "$pre"/python/kiln/_torch_native*.so; do [ -f "$so" ] && strip --strip-debug "$so"; done
      cp -L "$(ldconfig -p | sed -n 's/.*libsqlite3.so.0 (libc6,x86-64) => //p' | head -1)" "$pre/python/kiln/"
    fi
    # pybuild (run mode) builds the package there against this libsqlite3; --python-from: a package pybuild brought back.
    cp -L "$(ldconfig -p | sed -n 's/.*libsqlite3.so.0 (libc6,x86-64) => //p' | head -1)" "$pre/libsqlite3.so.0"
    if [ -n "$pyfrom" ]; then rm -rf "$pre/python"; mkdir -p "$pre/python"; tar -C "$pre/python" -xJf "$pyfrom"; fi
    src="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")"
    { echo "source=$src"; echo "build=$build"; echo "revision=$(git -C "$src" rev-parse --short HEAD)"
      git -C "$src" diff --quiet HEAD || echo "note=the source folder had uncommitted changes"; } >"$pre/manifest"
    du -sh "$pre"; ls "$pre"
    exit 0;;
  run) ;;
  *) echo "unknown mode '$mode' (pack or run)" >&2; exit 2;;
esac

out="${1:?run needs OUT_DIR}"; shift
phases=" ${*:-doctor tests bench examples runtime planner capture} "
want() { [[ "$phases" == *" $1 "* ]]; }
mkdir -p "$out"; out="$(cd "$out" && pwd)"
[ -f "$pre/manifest" ] || { echo "no $pre/manifest: run 'pack' where the binaries were built and carry .prebuilt" >&2; exit 3; }
src="$(sed -n 's/^source=//p' "$pre/manifest")"; build="$(sed -n 's/^build=//p' "$pre/manifest")"
if [ "$src" != "$root" ]; then mkdir -p "$(dirname "$src")"; ln -sfn "$root" "$src"; fi
mkdir -p "$build/tests" "$build/benchmarks"; cp "$pre/kiln" "$build/"; cp "$pre"/*_gpu_test "$build/tests/"
if [ -d "$pre/python/kiln" ]; then rm -rf "$build/python/kiln"; mkdir -p "$build/python"; cp -r "$pre/python/kiln" "$build/python/"; fi
for b in planner_cold_start capture_bench block_bench plan_load_bench shadow_bench plan_deserialize_profile \
    libkiln_api_trace.so; do
  [ -f "$pre/$b" ] && cp "$pre/$b" "$build/benchmarks/"
done
cudnn_lib="$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)"
[ -d "$cudnn_lib" ] || cudnn_lib=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib
export LD_LIBRARY_PATH="${cudnn_lib}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_EXPECT_GPU=1 PYTHONUNBUFFERED=1
kiln="$build/kiln"
stamp() { echo "[$(date +%T)] $*"; }
fails="$out/failed.txt"; : >"$fails"  # a file, so that phases run in the background can add to it
check() { [ "$1" -eq 0 ] || echo "$2: exit $1$([ "$1" -eq 124 ] && echo ' (timed out)')" >>"$fails"; }
# suite_specs DIR SELECTOR...: the benchmark suite's specs (bench/suite/shapes.py) into DIR as ID.json, each case
# whose id is a SELECTOR or whose family is one given as family:NAME.
suite_specs() {
  local dir="$1"; shift
  mkdir -p "$dir"
  python3 - "$dir" "$@" <<'PY'
import json, os, sys
sys.path.insert(0, "bench/suite")
import shapes
want = set(sys.argv[2:])
for c in shapes.cases():
    if c["id"] in want or "family:" + c["family"] in want:
        with open(os.path.join(sys.argv[1], c["id"] + ".json"), "w") as f:
            json.dump(c["spec"], f)
PY
}
cd "$root"
if want doctor; then
  stamp "doctor ($(sed -n 's/^revision=//p' "$pre/manifest"))"
  "$kiln" doctor >"$out/doctor.txt" 2>&1; rc=$?; cat "$out/doctor.txt"; check $rc "kiln doctor"
  [ $rc -eq 0 ] || { echo "no usable GPU: nothing else runs"; exit 1; }
fi
# Phase pybuild: the Python package built here, for this machine's Python and torch (the PyTorch venv), where no
# Python of that version was at hand for `pack` (a 3.12 with nanobind). It needs third_party/ carried without its
# python/ venv (cudnn_frontend, include, sqlite, googletest, postgresql) and the libsqlite3.so.0 of the packing
# machine in .prebuilt/ (pack copies it). It runs in the background from here on, beside the phases that need no
# Python; the Python phases wait for it (pywait). Its package replaces $build/python/kiln, and OUT/pykiln.tar.xz
# brings it back, so a later pack can carry it (prebuilt-gpu.sh pack --python-from TAR).
pyb_log="$out/pybuild.log"
pybuild() {
  local pb="${KILN_PYBUILD_DIR:-$root/build-devpy}" py3="${KILN_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
  local sq="$pre/libsqlite3.so.0"
  [ -f "$sq" ] || sq="$(ls "$pre"/python/kiln/libsqlite3.so* 2>/dev/null | head -1)"
  [ -f "$sq" ] || { echo "pybuild: no libsqlite3.so.0 in .prebuilt" >"$pyb_log"; return 3; }
  [ -f "$root/third_party/cudnn_frontend/include/cudnn_frontend.h" ] ||
    { echo "pybuild: third_party/ not carried" >"$pyb_log"; return 3; }
  local t0=$SECONDS
  KILN_GIT_REVISION="$(sed -n 's/^revision=//p' "$pre/manifest")" cmake -S "$root" -B "$pb" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCHMARKS=OFF -DKILN_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$py3" -DKILN_TORCH_PYTHON="$py3" -DKILN_SQLITE_SHARED="$sq" -DKILN_COMPRESS_DEBUG=OFF \
    >"$pyb_log" 2>&1 || { echo "pybuild: configure failed" >>"$pyb_log"; return 2; }
  local targets=(_kiln kiln_python_files)
  grep -q "_torch_native" "$pb/build.ninja" && targets+=(_torch_native)
  ninja -C "$pb" -j"$(nproc)" "${targets[@]}" >>"$pyb_log" 2>&1 || { echo "pybuild: build failed" >>"$pyb_log"; return 2; }
  cp -L "$sq" "$pb/python/kiln/libsqlite3.so.0"
  command -v patchelf >/dev/null && for so in "$pb"/python/kiln/_kiln*.so; do patchelf --set-rpath '$ORIGIN' "$so"; done
  strip --strip-debug "$pb"/python/kiln/*.so 2>/dev/null
  rm -rf "$build/python/kiln" "$pb/python/kiln/__pycache__"; mkdir -p "$build/python"; cp -r "$pb/python/kiln" "$build/python/"
  tar -C "$pb/python" -cJf "$out/pykiln.tar.xz" kiln
  echo "pybuild: done in $((SECONDS - t0)) s: $(ls "$pb/python/kiln" | tr '\n' ' ')" >>"$pyb_log"
}
pyb_pid=""
if want pybuild; then
  stamp "python package build (in the background)"
  pybuild & pyb_pid=$!
fi
pywait() {  # the Python phases: the package of pybuild, when this call builds one
  [ -n "$pyb_pid" ] || return 0
  wait "$pyb_pid"; local rc=$?; pyb_pid=""
  tail -3 "$pyb_log"; check $rc "pybuild"
  # The library path holds cuDNN and the toolkit; the carried libsqlite3 is found beside the extension ($ORIGIN).
}
gtest() {  # gtest BINARY FILTER SECONDS
  local b="$1" f="$2" s="$3" log="$out/$1.log"
  stamp "$b --gtest_filter=$f"
  timeout "$s" "$build/tests/$b" --gtest_filter="$f" >"$log" 2>&1; local rc=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\] [0-9]+ tests|^\[ +(OK|FAILED|SKIPPED) +\]" "$log" | tail -40
  grep -q "SKIPPED" "$log" && echo "$b: a test was skipped where a GPU is expected" >>"$fails"
  check $rc "$b"
}
if want gfilter; then  # one test binary with a filter: KILN_GTEST_BIN (runtime_gpu_test), KILN_GTEST_FILTER, seconds
  gtest "${KILN_GTEST_BIN:-runtime_gpu_test}" "${KILN_GTEST_FILTER:?gfilter needs KILN_GTEST_FILTER}" \
    "${KILN_GTEST_TIMEOUT:-120}"
  grep -E "^\[ (planner|preload)" "$out/${KILN_GTEST_BIN:-runtime_gpu_test}.log"
  read -ra mores <<<"${KILN_GTEST_MORE:-}"  # more binaries in the same call: "BIN=FILTER BIN=FILTER ..." (no globbing)
  for more in "${mores[@]}"; do
    gtest "${more%%=*}" "${more#*=}" "${KILN_GTEST_TIMEOUT:-120}"
  done
fi
if want tests; then  # the two binaries at once (no test of theirs asserts a time): the call's minutes are few
  gtest validate_gpu_test '*' 90 >"$out/tests-validate.txt" 2>&1 &
  gtest tune_gpu_test '*' 150 >"$out/tests-tune.txt" 2>&1
  wait
  cat "$out/tests-validate.txt" "$out/tests-tune.txt"
fi
if want attn; then  # issue 36: attention's diagonal band (windows, bottom-right) against both references
  stamp "attention variants"
  gtest validate_gpu_test 'DeviceReference.Sdpa*' 60
  KILN_OPCOV_FILTER=sdpa gtest runtime_gpu_test 'OpCoverage*' 180
  grep -E '^OPCOV' "$out/runtime_gpu_test.log" | tee "$out/attn-opcov.txt"
  gtest capture_gpu_test 'DecodeLoopGpu*' 120  # a paged decode loop of 100 steps from one CUDA graph
  grep -E '^\[ decode \]' "$out/capture_gpu_test.log"
fi
if want bench; then
  stamp "tuning benchmark"
  timeout 300 python3 bench/tune_bench.py --kiln "$kiln" --timeout "${KILN_BENCH_TIMEOUT:-40}" \
    --out "$out/tuning.json" >"$out/bench.md" 2>"$out/bench.err"; rc=$?
  cat "$out/bench.err" "$out/bench.md"; check $rc "tune_bench"
fi
if want normtune; then  # issue 37: what a norm's tune costs (per candidate and phase), exhaustive and budgeted
  stamp "norm tuning cost"
  suite_specs "$out/normtune/specs" family:layer_norm family:rms_norm
  # Modes: exhaustive (every candidate), budgeted (the default rule), firstN (the rule compiling N first).
  # A "-hN" suffix: with N build helpers (-h0: every build in the tune's process), e.g. exhaustive-h0.
  modes="${KILN_NORMTUNE_MODES:-exhaustive-h0 exhaustive budgeted}"
  for mode in $modes; do
    case "${mode%-h*}" in
      exhaustive) args=(--tune-arg=--exhaustive) ;;
      first*) args=("--tune-arg=--compile-first=${mode#first}") ;;
      *) args=() ;;
    esac
    [[ "$mode" == *-h* ]] && args+=("--tune-arg=--build-helpers=${mode##*-h}")
    KILN_LOG=info timeout 200 python3 bench/tune_bench.py --kiln "$kiln" --timeout 60 --no-verify-run "${args[@]}" \
      --out "$out/normtune/$mode.json" "$out"/normtune/specs/*.json >"$out/normtune/$mode.md" 2>"$out/normtune/$mode.err"
    check $? "tune_bench (norms, $mode)"; cat "$out/normtune/$mode.err"
  done
  ref="${modes%% *}"  # the first mode is the reference (an exhaustive one)
  for mode in $modes; do
    [ "$mode" = "$ref" ] && continue
    python3 bench/budget_quality.py "$out/normtune/$ref.json" "$out/normtune/$mode.json" \
      --json "$out/normtune/quality-$mode.json"; check $? "budget_quality $mode"
  done
  # The start of a stored runtime-compiled plan (a norm's winner is one): its parts, then through the Planner with
  # the application's CUDA context made first (issue 37's goal: ready <= 10 ms after create, first run <= 1 ms over
  # a warm one). Each in a new process.
  spec="$out/normtune/specs/rms_norm_65536x1024.json"
  timeout 60 "$kiln" tune "$spec" --store "$out/normtune/cs.db" >"$out/normtune/cs-tune.txt" 2>&1
  for args in "--mode parts" "--mode parts" "--mode planner --context-first" "--mode planner --context-first" \
              "--mode planner --context-first --no-prime"; do
    echo "== planner_cold_start $args" >>"$out/normtune/coldstart.txt"
    timeout 60 "$build/benchmarks/planner_cold_start" --store "$out/normtune/cs.db" --spec "$spec" $args \
      >>"$out/normtune/coldstart.txt" 2>&1; check $? "planner_cold_start $args"
  done
  cat "$out/normtune/coldstart.txt"
fi
if want deserprof; then  # issue 37: a stored plan's deserialize split into cuDNN's steps and sampled
  stamp "deserialize profile"
  ids="${KILN_DESERPROF_IDS:-rms_norm_65536x1024,matmul_bias_gelu_2048x4096x16384,conv_bias_relu_3x3_64to64_56_n32}"
  suite_specs "$out/deserprof/specs" ${ids//,/ }
  for spec in "$out"/deserprof/specs/*.json; do
    name="$(basename "$spec" .json)"
    timeout 90 "$kiln" tune "$spec" --store "$out/deserprof/ds.db" >"$out/deserprof/$name.tune.txt" 2>&1
    check $? "kiln tune $name"
    timeout 90 "$build/benchmarks/plan_deserialize_profile" --store "$out/deserprof/ds.db" --spec "$spec" \
      --reps "${KILN_DESERPROF_REPS:-10}" --dump "$out/deserprof/$name.backend.json" >"$out/deserprof/$name.txt" 2>&1
    check $? "plan_deserialize_profile $name"
    # A new process's start: the plan's load beside the precompiled engines' library load (twice).
    for i in 1 2; do
      timeout 60 "$build/benchmarks/plan_deserialize_profile" --store "$out/deserprof/ds.db" --spec "$spec" --overlap \
        >>"$out/deserprof/$name-overlap.txt" 2>&1
      check $? "plan_deserialize_profile $name --overlap"
    done
    echo "== $name"; head -c 2500 "$out/deserprof/$name.txt"; cat "$out/deserprof/$name-overlap.txt"
  done
fi

if want coldprof; then  # issue 37: where a stored plan's start goes, driver call by driver call (no nsys there)
  # Each graph tuned into a store, then planner_cold_start in new processes: parts and the Planner (context first),
  # each once under libkiln_api_trace.so (CUDA's injection hook, CUPTI callbacks) and once without it.
  stamp "cold start profile"
  ids="${KILN_COLDPROF_IDS:-rms_norm_65536x1024,matmul_bias_gelu_2048x4096x16384,conv_bias_relu_3x3_64to64_56_n32}"
  suite_specs "$out/coldprof/specs" ${ids//,/ }
  cupti_lib="$(python3 -c 'import os, nvidia.cu13 as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)"
  tracer="$build/benchmarks/libkiln_api_trace.so"
  for spec in "$out"/coldprof/specs/*.json; do
    name="$(basename "$spec" .json)"
    timeout 90 "$kiln" tune "$spec" --store "$out/coldprof/cs.db" >"$out/coldprof/$name.tune.txt" 2>&1
    check $? "kiln tune $name"
    for mode in parts planner; do
      args=(--mode "$mode"); [ "$mode" = planner ] && args+=(--context-first)
      timeout 60 "$build/benchmarks/planner_cold_start" --store "$out/coldprof/cs.db" --spec "$spec" "${args[@]}" \
        >"$out/coldprof/$name-$mode.txt" 2>&1; check $? "planner_cold_start $name $mode"
      LD_LIBRARY_PATH="$cupti_lib:$LD_LIBRARY_PATH" CUDA_INJECTION64_PATH="$tracer" \
        KILN_API_TRACE="$out/coldprof/$name-$mode.trace" timeout 60 "$build/benchmarks/planner_cold_start" \
        --store "$out/coldprof/cs.db" --spec "$spec" "${args[@]}" >"$out/coldprof/$name-$mode-traced.txt" 2>&1
      check $? "planner_cold_start $name $mode (traced)"
      echo "== $name $mode"; cat "$out/coldprof/$name-$mode.txt"
    done
    # The spec listed in PlannerOptions::preload: create() starts loading and warming it (twice: new processes).
    # --app-work-ms: the first obtain at once after create, and 40 ms later (an application's own start between).
    for work in 0 40 40; do
      timeout 60 "$build/benchmarks/planner_cold_start" --store "$out/coldprof/cs.db" --spec "$spec" --mode planner \
        --context-first --preload --app-work-ms $work >>"$out/coldprof/$name-preload.txt" 2>&1
      check $? "planner_cold_start $name preload"
    done
    echo "== $name planner --preload (app work 0, 40, 40 ms)"; cat "$out/coldprof/$name-preload.txt"
  done
fi
if want preloadmany; then  # issue 37: several stored shapes of one structure loaded at create on 1, 4 and 8 threads
  # Do cuDNN's deserializes run side by side? (The preload report's ms is the loads' wall time.) RMS norm shapes:
  # runtime-compiled plans whose deserialize is 13-23 ms of cuDNN's host work each (bench/results/h100/
  # deserialize-profile).
  stamp "preload of many stored shapes"
  mkdir -p "$out/preloadmany"
  toks="${KILN_PRELOADMANY_TOKENS:-65536 49152 32768 24576 16384 12288 8192 4096}"
  python3 - "$out/preloadmany" $toks <<'PY'
import json, os, sys
sys.path.insert(0, "bench/suite")
import shapes
for t in map(int, sys.argv[2:]):
    c = {"family": "rms_norm", "id": f"rms_norm_tokens_{t}x1024", "params": {"tokens": t, "hidden": 1024}}
    g = shapes.kiln_spec(c)
    g["name"] = "rms_norm_tokens"
    g["dynamic"] = {"tokens": t}
    g["tensors"]["x"]["dims"][0] = "tokens"
    with open(os.path.join(sys.argv[1], f"dyn_{t}.json"), "w") as f:
        json.dump(g, f)
PY
  first=""
  for t in $toks; do
    [ -z "$first" ] && first=$t
    timeout 60 "$kiln" tune "$out/preloadmany/dyn_$t.json" --store "$out/preloadmany/dyn.db" \
      >>"$out/preloadmany/dyn.tune.txt" 2>&1
    check $? "kiln tune dyn_$t"
  done
  for threads in 1 4 8 1 4 8; do
    KILN_PRELOAD_THREADS=$threads timeout 60 "$build/benchmarks/planner_cold_start" --store "$out/preloadmany/dyn.db" \
      --spec "$out/preloadmany/dyn_$first.json" --mode planner --context-first --preload --app-work-ms 400 \
      >>"$out/preloadmany/dyn-preload-t$threads.txt" 2>&1; check $? "planner_cold_start dyn preload t$threads"
  done
  for threads in 1 4 8; do
    echo "== dynamic rms_norm, $(echo $toks | wc -w) stored shapes, preload on $threads thread(s)"
    grep -E "preload:|obtain  |first execute" "$out/preloadmany/dyn-preload-t$threads.txt"
  done
fi
if want fp8probe; then  # issue 37: the FP8 recipe and matmul+AMAX against their plain GEMMs, tuned alone
  stamp "fp8 and amax parts"
  mkdir -p "$out/fp8probe"
  python3 - "$out/fp8probe" <<'PY'
import copy, json, os, sys
sys.path.insert(0, "bench/suite")
import shapes
for c in shapes.cases():
    if c["family"] not in ("fp8_recipe", "matmul_amax"):
        continue
    g = c["spec"]
    with open(os.path.join(sys.argv[1], c["id"] + ".json"), "w") as f:
        json.dump(g, f)
    plain = copy.deepcopy(g)  # the GEMM alone, its output as the recipe's (bf16)
    plain["name"] = g["name"] + "_gemm"
    plain["nodes"] = [n for n in g["nodes"] if n["op"] == "matmul"]
    plain["outputs"] = ["y"]
    for t in ("amax", "scale", "fp8_max"):
        plain["tensors"].pop(t, None)
    with open(os.path.join(sys.argv[1], c["id"] + "_gemm.json"), "w") as f:
        json.dump(plain, f)
    if c["family"] != "matmul_amax":
        continue
    m, n = c["params"]["m"], c["params"]["n"]
    for alone, nodes in (("amax_alone", [{"name": "amax", "op": "reduce_amax", "inputs": ["y"], "outputs": ["amax"],
                                          "axes": [0, 1, 2]}]),
                         ("abs_max", [{"name": "abs", "op": "abs", "inputs": ["y"], "outputs": ["ay"]},
                                      {"name": "max", "op": "reduce_max", "inputs": ["ay"], "outputs": ["amax"],
                                       "axes": [0, 1, 2]}])):
        r = {"name": f"{c['id']}_{alone}", "io_dtype": "bf16", "intermediate_dtype": "fp32", "compute_dtype": "fp32",
             "tensors": {"y": {"dims": [1, m, n]}, "amax": {"dims": [1, 1, 1], "dtype": "fp32"}},
             "nodes": nodes, "outputs": ["amax"]}
        with open(os.path.join(sys.argv[1], f"{c['id']}_{alone}.json"), "w") as f:
            json.dump(r, f)
    # The AMAX in two reductions: over each row, then over the row maxima (a lone reduction of every element is
    # refused by cuDNN's engines at 8192x8192: a launch error).
    rows = {"name": f"{c['id']}_rows_amax", "io_dtype": "bf16", "intermediate_dtype": "fp32", "compute_dtype": "fp32",
            "tensors": {"y": {"dims": [1, m, n]}, "rmax": {"dims": [1, m, 1], "dtype": "fp32"}},
            "nodes": [{"name": "rows", "op": "reduce_amax", "inputs": ["y"], "outputs": ["rmax"], "axes": [2]}],
            "outputs": ["rmax"]}
    last = {"name": f"{c['id']}_rows_then_all", "io_dtype": "fp32", "intermediate_dtype": "fp32",
            "compute_dtype": "fp32",
            "tensors": {"rmax": {"dims": [1, m, 1]}, "amax": {"dims": [1, 1, 1], "dtype": "fp32"}},
            "nodes": [{"name": "all", "op": "reduce_amax", "inputs": ["rmax"], "outputs": ["amax"], "axes": [1]}],
            "outputs": ["amax"]}
    for r in (rows, last):
        with open(os.path.join(sys.argv[1], r["name"] + ".json"), "w") as f:
            json.dump(r, f)
PY
  for spec in "$out"/fp8probe/${KILN_FP8PROBE_GLOB:-*}.json; do
    name="$(basename "$spec" .json)"
    timeout 150 "$kiln" tune "$spec" --json --store "$out/fp8probe/fp8.db" >"$out/fp8probe/$name.tune.json" \
      2>"$out/fp8probe/$name.tune.err"; check $? "kiln tune $name"
    python3 - "$out/fp8probe/$name.tune.json" <<'PY'
import json, sys
try:
    runs = json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[1], "unreadable:", e); sys.exit(0)
for r in runs if isinstance(runs, list) else [runs]:
    s, fu = r.get("summary", {}), r.get("fusion") or {}
    print(f"{r.get('title','?')[:70]:70s} winner {r.get('winner')} best {s.get('best_ms')} heur {s.get('heuristic_ms')}"
          f" n={sum((s.get('counts') or {}).values())} fusion={fu.get('decision')} unfused={fu.get('unfused_unavailable_reason') or (fu.get('unfused') or {}).get('median_ms')}")
PY
  done
fi
if want settleab; then  # the timer's settle time after the L2 flush, A/B: the same pinned plan at 0 and 100 us, in turn
  stamp "settle A/B"
  dir="$out/settleab"; suite_specs "$dir/specs" ${KILN_SETTLE_IDS:-rms_norm_16384x8192 rms_norm_65536x1024}
  for spec in "$dir"/specs/*.json; do
    name="$(basename "$spec" .json)"
    pins="${KILN_SETTLE_PINS:-}"
    if [ -z "$pins" ]; then  # the suite's winners: a bf16 row of 8192 takes groups of 128-512, one of 1024 of 32-128
      case "$name" in *x8192) pins=knl2_group=256_persist=0_threads=256 ;; *) pins=knl2_group=32_persist=0_threads=128 ;; esac
    fi
    for pin in $pins; do
      for round in 1 2; do
        for us in 0 100; do
          r="$(timeout 60 "$kiln" tune "$spec" --pin "$pin" --no-unfused --settle-us "$us" --json 2>/dev/null |
               python3 -c 'import json,sys; d=json.load(sys.stdin); g=d[0] if isinstance(d,list) else d; c=g["candidates"][0]; print("%.4f %d" % (c["median_ms"], c["samples"]))' 2>/dev/null)"
          if [ -n "$r" ]; then echo "$name $pin round=$round settle_us=$us median_ms,samples=$r" | tee -a "$dir/settleab.txt"
          else echo "settleab: $name $pin --settle-us $us gave no result" >>"$fails"; fi
        done
      done
    done
  done
fi
if want ncuprof; then  # issue 37: Nsight Compute on Kiln's plans and the PyTorch peer's kernels, per suite case
  # Per case (KILN_NCU_IDS): kiln tune (no unfused side) names the winner and the fastest Kiln kernel (knlN); each is
  # run once under ncu (`kiln run --pin`, every kernel of the run: the input fills are labelled by name), then the
  # peer: bench/ncu_torch_case.py's one call in the NVTX range kiln_prof (torch.compile max-autotune, then eager).
  # ncu flushes the caches before each kernel (--cache-control all) and leaves the clocks alone (METHOD.md).
  stamp "ncu profiles"
  ids="${KILN_NCU_IDS:-rms_norm_16384x8192,rms_norm_65536x1024}"
  dir="$out/ncuprof"; suite_specs "$dir/specs" ${ids//,/ }
  ncu_bin="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)"
  sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
            --section SchedulerStats --section WarpStateStats
            --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct)
  ncu_run() { timeout 240 "$ncu_bin" --clock-control none --cache-control all "${sections[@]}" "$@" </dev/null; }
  [ -x "$ncu_bin" ] || { echo "ncuprof: no ncu on this machine (PATH, /opt/nvidia/nsight-compute)" >>"$fails"; }
  for spec in "$dir"/specs/*.json; do
    name="$(basename "$spec" .json)"
    timeout 120 "$kiln" tune "$spec" --json --no-unfused >"$dir/$name.tune.json" 2>"$dir/$name.tune.err"
    check $? "kiln tune $name"
    picks="$(python3 - "$dir/$name.tune.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
g = d[0] if isinstance(d, list) else d
ok = [c for c in g["candidates"] if c.get("disposition") == "Passed" and c.get("median_ms")]
knl = sorted((c for c in ok if c["identity"].startswith("knl")), key=lambda c: c["median_ms"])
other = sorted((c for c in ok if not c["identity"].startswith("knl")), key=lambda c: c["median_ms"])
seen = set()
for tag, c in (("winner", next((c for c in ok if c["identity"] == g["winner"]), None)),
               ("best_knl", knl[0] if knl else None), ("best_other", other[0] if other else None)):
    if c and c["identity"] not in seen:
        seen.add(c["identity"])
        print(tag, c["identity"], "%.4f" % c["median_ms"])
PY
)"
    echo "$picks" | tee "$dir/$name.picks.txt"
    echo "$picks" | while read -r tag ident ms; do
      [ -n "$ident" ] || continue
      ncu_run "$kiln" run "$spec" --pin "$ident" >"$dir/$name-kiln-$tag.ncu.txt" 2>&1
      check $? "ncu kiln run $name $ident"
    done
    for mode in compile eager; do
      ncu_run --nvtx --nvtx-include "kiln_prof/" python3 bench/ncu_torch_case.py "$name" --mode "$mode" \
        >"$dir/$name-torch-$mode.ncu.txt" 2>&1
      check $? "ncu torch $name $mode"
    done
    for f in "$dir/$name"-*.ncu.txt; do
      echo "== $(basename "$f")"
      grep -E "^  [A-Za-z_].*\(|Duration|DRAM Throughput|Memory Throughput|dram__bytes|Achieved Occupancy|Registers Per|Block Size|Grid Size|Theoretical Occupancy|lts__t_sector_hit|Waves Per SM" "$f" | head -60
    done
  done
fi
if want normprior; then  # issue 37: the candidate budget's priors, on norms with dynamic tokens (one structure)
  # Each family at hidden 1024, tokens 65536 then 16384 then 4096: tuned exhaustively (the reference), then with
  # the budget into a fresh store, where the later token counts start from the earlier ones' winners.
  stamp "norm tuning with the store's priors"
  mkdir -p "$out/normprior/specs"
  python3 - "$out/normprior/specs" <<'PY'
import json, os, sys
sys.path.insert(0, "bench/suite")
import shapes
n = 0
for fam in ("rms_norm", "layer_norm"):
    for t in (65536, 16384, 4096):
        c = {"family": fam, "id": f"{fam}_tokens_{t}x1024", "params": {"tokens": t, "hidden": 1024}}
        g = shapes.kiln_spec(c)
        g["dynamic"] = {"tokens": t}
        g["tensors"]["x"]["dims"][0] = "tokens"
        n += 1
        with open(os.path.join(sys.argv[1], f"{n}_{c['id']}.json"), "w") as f:
            json.dump(g, f)
PY
  for mode in exhaustive budgeted; do
    args=(); [ "$mode" = exhaustive ] && args=(--tune-arg=--exhaustive)
    KILN_LOG=info timeout 200 python3 bench/tune_bench.py --kiln "$kiln" --timeout 60 --no-verify-run "${args[@]}" \
      --out "$out/normprior/$mode.json" "$out"/normprior/specs/*.json >"$out/normprior/$mode.md" 2>"$out/normprior/$mode.err"
    check $? "tune_bench (dynamic norms, $mode)"; grep -v '^tune ' "$out/normprior/$mode.err"
  done
  python3 bench/budget_quality.py "$out/normprior/exhaustive.json" "$out/normprior/budgeted.json" \
    --json "$out/normprior/quality.json"; check $? "budget_quality (priors)"
fi
if want examples; then
  # Every example tuned (candidates gated by the new gate): what was rejected, and why.
  stamp "examples: kiln tune, every candidate gated"
  for e in examples/*.json; do
    n="$(basename "$e" .json)"
    timeout 60 "$kiln" tune "$e" --json --no-unfused --candidate-budget-ms 20 >"$out/ex-$n.json" 2>"$out/ex-$n.err"; rc=$?
    python3 - "$out/ex-$n.json" "$n" "$rc" <<'PY'
import json, sys
path, name, rc = sys.argv[1:]
try:
    reps = json.load(open(path))
except Exception as ex:
    print(f"{name}: exit {rc}, no report ({ex})"); sys.exit(0)
for r in reps:
    c = r.get("candidates", [])
    bad = [f"{x.get('identity')} {x.get('disposition')}: {(x.get('message') or '')[:160]}" for x in c if x.get("disposition") != "Passed"]
    print(f"{r.get('title') or name}: exit {rc}, {len(c)} candidates, {len(c) - len(bad)} passed, winner {r.get('winner')}")
    for b in bad: print("   " + b)
PY
    check $rc "tune $e"
  done | tee "$out/examples.txt"
fi
if want runtime; then
  gtest runtime_gpu_test 'RetuneGpu*:Deviceless*:Store*:FrontendUpgradeCli*:OpCoverage*' 240
  gtest cli_runtime_gpu_test 'RunCli*' 120  # `kiln run` as a user runs it (apps/kiln/tests/runtime/)
fi
if want plannergpu; then  # the Planner's GPU tests alone (planner's first step, without its benchmarks)
  gtest runtime_gpu_test 'PlannerGpu*' 180
fi
if want planner; then  # issue 12: the Planner on the GPU, its cold start, and its per-source benchmark
  gtest runtime_gpu_test 'PlannerGpu*' 180
  stamp "cold start"
  cs="$out/coldstart"; mkdir -p "$cs"
  timeout 120 "$kiln" tune examples/small/conv_bias_relu.json --no-unfused --store "$cs/plans.db" >"$cs/tune.txt" 2>&1
  for mode in parts planner parts planner; do  # each in a new process
    timeout 60 "$build/benchmarks/planner_cold_start" --store "$cs/plans.db" --spec examples/small/conv_bias_relu.json \
      --mode $mode >>"$out/coldstart.txt" 2>&1; check $? "planner_cold_start $mode"
  done
  cat "$out/coldstart.txt"
  stamp "planner benchmark"
  timeout 480 python3 bench/planner_bench.py --kiln "$kiln" --out "$out/runtime.json" --work "$out/planner-work" \
    >"$out/planner_bench.txt" 2>&1; rc=$?
  tail -40 "$out/planner_bench.txt"; check $rc "planner_bench"
fi
if want capture; then  # issue 13: CUDA Graphs over tuned plans (capture, update, replay), and their benchmark
  gtest capture_gpu_test '*' 180
  stamp "capture benchmark (tuned plans from a store)"
  cb="$out/capture-work"; mkdir -p "$cb"
  # Both specs tuned into a store first: the benchmark launches and replays tuned plans (the JSON says
  # each plan's source).
  for sp in examples/small/conv_bias_relu.json bench/capture/chain_conv8.json; do
    timeout 120 "$kiln" tune "$sp" --no-unfused --store "$cb/plans.db" >>"$cb/tune.txt" 2>&1
    check $? "tune $sp for capture_bench"
  done
  stamp "kiln tune --graph-replay"
  timeout 120 "$kiln" tune examples/small/conv_bias_relu.json --no-unfused --graph-replay >"$out/tune-graph-replay.txt" 2>&1
  rc=$?; tail -15 "$out/tune-graph-replay.txt"; check $rc "kiln tune --graph-replay"
  if [ -x "$build/benchmarks/capture_bench" ]; then
    timeout 300 "$build/benchmarks/capture_bench" --store "$cb/plans.db" --spec examples/small/conv_bias_relu.json \
      --out "$out/capture.json" >"$out/capture_bench.txt" 2>&1; rc=$?
    cat "$out/capture_bench.txt"; check $rc "capture_bench"
  else
    echo "capture_bench: not packed" >>"$fails"
  fi
fi
if want gputier; then  # the whole GPU tier (every *_gpu_test binary, each whole; the 600-spec sweep left out)
  for exe in "$build"/tests/*_gpu_test; do
    b="$(basename "$exe")"; f='*'; [ "$b" = runtime_gpu_test ] && f='-*Sweep*'
    gtest "$b" "$f" 300 >"$out/tier-$b.txt" 2>&1; cat "$out/tier-$b.txt"
  done
  stamp "gpu tier: $(cat "$out"/*_gpu_test.log | grep -cE '^\[ +OK +\]') passed, $(cat "$out"/*_gpu_test.log | grep -cE '^\[ +FAILED +\] [A-Za-z]') failed, $(cat "$out"/*_gpu_test.log | grep -cE '^\[ +SKIPPED +\]') skipped"
fi
if want shadow; then  # issue 35: shadow sampling on real requests (its GPU tests), and what it costs a request
  stamp "shadow"
  gtest runtime_gpu_test 'ShadowGpu.*' 240 >"$out/shadow-tests.txt" 2>&1; cat "$out/shadow-tests.txt"
  grep -E '^\[ shadow \]' "$out/runtime_gpu_test.log" | tee -a "$out/shadow-tests.txt"
  timeout 240 "$build/benchmarks/shadow_bench" --spec examples/matmul_bias_gelu.json --spec examples/conv_bias_relu.json --requests 20000 \
    --work "$out/shadow-work" --out "$out/shadow.json" >"$out/shadow-bench.txt" 2>&1; rc=$?
  cat "$out/shadow-bench.txt"; check $rc "shadow_bench"; rm -rf "$out/shadow-work"
fi
if want rerun; then  # issue 35: two configurations re-run side by side (the engine of kiln plans diff --rerun)
  stamp "rerun"
  gtest tools_gpu_test '*' 120 >"$out/rerun-tests.txt" 2>&1; cat "$out/rerun-tests.txt"
  grep -E '^\[ rerun \]' "$out/tools_gpu_test.log"
fi
if want replayshadow; then  # issue 35: a plan goes from shadow to active under kiln replay's traffic, all from the CLI
  stamp "shadow under kiln replay"
  rs="$out/replay-shadow"; mkdir -p "$rs"; st="$rs/plans.db"
  cat >"$rs/mm.json" <<'SPEC'
{"name": "replay_shadow_mm", "io_dtype": "fp16", "intermediate_dtype": "fp32", "compute_dtype": "fp32",
 "tensors": {"a": {"dims": [1, 512, 1024]}, "w": {"dims": [1, 1024, 1024]}, "bias": {"dims": [1, 1, 1024]}},
 "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "w"], "outputs": ["c"]},
           {"name": "bias", "op": "bias_add", "inputs": ["c", "bias"], "outputs": ["b"]},
           {"name": "relu", "op": "relu", "inputs": ["b"], "outputs": ["y"]}],
 "outputs": ["y"]}
SPEC
  # About 30 s of requests: the judge takes one sample at a time, and the rule decides after about 1400 of them.
  echo '{"format": "kiln-trace", "version": 1, "requests": [{"spec": "mm.json", "count": 1500000}]}' >"$rs/trace.json"
  # The tuner's winner and its slowest passing configuration; the slow one made active, the winner put in shadow.
  "$kiln" tune "$rs/mm.json" --no-unfused --top-k 6 --candidate-budget-ms 50 --store "$rs/scratch.db" >"$rs/tune.txt" 2>&1
  best="$(sed -n 's/^best: \([^ ]*\) .*/\1/p' "$rs/tune.txt" | head -1)"
  worst="$(sed -n 's/^best vs worst: .*(worst passing \([^ ]*\) .*/\1/p' "$rs/tune.txt" | head -1)"
  grep -E "^best" "$rs/tune.txt"
  if [ -n "$best" ] && [ -n "$worst" ] && [ "$best" != "$worst" ]; then
    "$kiln" tune "$rs/mm.json" --no-unfused --pin "$worst" --store "$st" >"$rs/pin-slow.txt" 2>&1; check $? "tune --pin (slow)"
    "$kiln" tune "$rs/mm.json" --no-unfused --pin "$best" --rollout shadow --store "$st" >"$rs/pin-best.txt" 2>&1
    check $? "tune --pin --rollout shadow"
    "$kiln" plans candidates --store "$st" | tee "$rs/candidates.txt"
    timeout 150 "$kiln" replay "$rs/trace.json" --store "$st" --shadow-every 1 >"$rs/replay.txt" 2>&1
    check $? "kiln replay --shadow-every"
    grep -iE "shadow|memory|store" "$rs/replay.txt" | head -12
    sig="$("$kiln" signature "$rs/mm.json" 2>/dev/null | grep -oE '[0-9a-f]{16,}' | head -1)"
    "$kiln" plans history --structure "${sig:0:12}" --store "$st" | tee "$rs/history.txt"
    grep -q "shadow.*active\|-> active.*promote\|promote" "$rs/history.txt" || echo "replayshadow: no promotion in the history" >>"$fails"
  else
    echo "replayshadow: no second passing configuration (best '$best', worst '$worst')" | tee -a "$fails"
  fi
fi
if want fe123; then  # issue 35's upgrade report on the real frontend move: tuned by both kilns, diffed and re-run here
  stamp "upgrade report: frontend $("$pre/kiln-old-frontend" doctor 2>&1 | grep -io 'frontend[^,;]*' | head -1) -> this kiln's"
  up="$out/upgrade"; mkdir -p "$up"; st="$up/plans.db"
  ex="conv_bias_relu matmul_bias_gelu layer_norm rms_norm matmul_amax sdpa_fwd conv_dgrad"
  specs=""; for e in $ex; do specs="$specs --spec examples/small/$e.json"; done
  for who in old new; do
    k="$kiln"; [ $who = old ] && k="$pre/kiln-old-frontend"
    for e in $ex; do
      timeout 90 "$k" tune "examples/small/$e.json" --no-unfused --store "$st" --candidate-budget-ms 40 \
        >"$up/tune-$who-$e.txt" 2>&1 || echo "  tune $who $e: exit $? ($(tail -1 "$up/tune-$who-$e.txt"))"
    done
  done
  "$kiln" plans ls --json --store "$st" >"$up/ls.json" 2>"$up/ls.err"
  keys="$(python3 - "$up/ls.json" <<'PY'
import json, sys
fe = {}
for r in json.load(open(sys.argv[1])):
    fe.setdefault(r["fingerprint"]["cudnn_frontend_version"], r["fingerprint_key"])
print(" ".join(fe[v] for v in sorted(fe)))
PY
)"
  set -- $keys
  if [ $# -eq 2 ]; then
    "$kiln" plans diff --store "$st" --from "$1" --to "$2" --rerun $specs >"$up/diff.txt" 2>&1
    check $? "kiln plans diff --rerun (text)"; cat "$up/diff.txt"
    "$kiln" plans diff --store "$st" --from "$1" --to "$2" --rerun $specs --json >"$up/diff.json" 2>"$up/diff-json.err"
    check $? "kiln plans diff --rerun --json"
  else
    echo "fe123: expected two environments in the store, found: $keys" | tee -a "$fails"
  fi
fi
if want fleet; then  # a PostgreSQL fleet store on this machine: workers, NOTIFY, replay (scripts/fleet-demo.sh)
  stamp "fleet"
  timeout 560 bash scripts/fleet-demo.sh "$kiln" "$out/fleet" >"$out/fleet.txt" 2>&1; rc=$?
  cat "$out/fleet.txt"; check $rc "scripts/fleet-demo.sh"
fi
if want mainjob; then  # README command 1 on the GPU: tune, reload in new processes, verify, report
  stamp "main job (scripts/run.sh with the carried kiln)"
  KILN_SKIP_BUILD=1 KILN_BUILD_DIR="$build" KILN_STORE="$out/mainjob-plans.db" timeout 400 bash scripts/run.sh \
    >"$out/mainjob.txt" 2>&1; rc=$?
  grep -v "^tune .*: [0-9]*/[0-9]* " "$out/mainjob.txt" | tail -40; check $rc "scripts/run.sh (main job)"
fi
# The Python phases' interpreter (the PyTorch venv) and what they import beside the package: pytest and cuDNN
# Frontend's Python wheel, carried in .pydeps (the machine reaches no registry), unpacked, not installed, so the
# venv is left as it was.
py="${KILN_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"; deps="${TMPDIR:-/tmp}/kiln-pydeps"
pydeps() {  # every Python phase calls it first: it also waits for this call's pybuild
  pywait
  [ -d "$deps" ] || "$py" -c 'import sys, zipfile, glob; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in glob.glob(sys.argv[2] + "/*.whl")]' \
    "$deps" "$root/.pydeps"
}
if want python; then  # issue 34: the Python package on real PyTorch (python/tests, GPU suite included)
  stamp "python"
  pydeps
  export PYTHONPATH="$build/python:$deps" KILN_CLI="$kiln"
  if ls "$build"/python/kiln/_torch_native*.so >/dev/null 2>&1; then export KILN_EXPECT_TORCH_NATIVE=1; fi
  # KILN_PY_TESTS: a subset (pytest arguments, e.g. "python/tests/gpu/test_gpu_torch_op.py -k eager") for a short call.
  # shellcheck disable=SC2086
  timeout 400 "$py" -m pytest -p no:cacheprovider -v -rs ${KILN_PY_TESTS:-"$root/python/tests"} \
    >"$out/python-tests.txt" 2>&1; rc=$?
  tail -30 "$out/python-tests.txt"; check $rc "python/tests (pytest, GPU suite included)"
fi
if want pybench; then  # issue 34's benchmark: per-call overhead, and the example model end to end
  stamp "python benchmark"
  pydeps
  export PYTHONPATH="$build/python:$deps"
  timeout 200 "$py" "$root/bench/python/overhead.py" --json "$out/python-overhead.json" >"$out/python-overhead.txt" 2>&1
  rc=$?; tail -8 "$out/python-overhead.txt"; check $rc "bench/python/overhead.py"
  if [ "${KILN_PYBENCH_MLP:-1}" != 0 ]; then  # KILN_PYBENCH_MLP=0: the overhead benchmark alone (a short call)
    timeout 400 "$py" "$root/python/examples/mlp_block.py" --store "$out/python-plans.db" --tune --profile \
      --json "$out/python-mlp.json" >"$out/python-mlp.txt" 2>&1; rc=$?
    tail -6 "$out/python-mlp.txt"; check $rc "python/examples/mlp_block.py"
  fi
fi
if want attnbwd; then  # issue 36: the attention backward pass, Kiln's tuned plan against PyTorch's backends
  stamp "attention backward benchmark"
  pydeps
  export PYTHONPATH="$build/python:$deps"
  timeout "${KILN_ATTNBWD_TIMEOUT:-420}" "$py" "$root/bench/attention_backward.py" --kiln "$kiln" \
    --out "$out/attnbwd" --tokens "${KILN_ATTNBWD_TOKENS:-4096}" ${KILN_ATTNBWD_SEQS:+--seqs "$KILN_ATTNBWD_SEQS"} \
    $([ "${KILN_ATTNBWD_FP8:-0}" = 1 ] && echo --fp8) \
    >"$out/attnbwd.txt" 2>&1
  rc=$?; cat "$out/attnbwd.txt" | grep -E '^\[ bwd \]|Error|error' | tail -20; check $rc "bench/attention_backward.py"
fi
if want attnfp8; then  # issue 36: FP8 attention's forward, Kiln's tuned plan against its bf16 one and PyTorch's
  stamp "attention fp8 benchmark"
  pydeps
  export PYTHONPATH="$build/python:$deps"
  timeout "${KILN_ATTNFP8_TIMEOUT:-420}" "$py" "$root/bench/attention_fp8.py" --kiln "$kiln" \
    --out "$out/attnfp8" --tokens "${KILN_ATTNFP8_TOKENS:-16384}" ${KILN_ATTNFP8_SEQS:+--seqs "$KILN_ATTNFP8_SEQS"} \
    >"$out/attnfp8.txt" 2>&1
  rc=$?; grep -E '^\[ fp8 \]|Error|error' "$out/attnfp8.txt" | tail -30; check $rc "bench/attention_fp8.py"
fi
if want attndecode; then  # issue 36: decode over paged K/V caches against PyTorch's backends on dense K/V
  stamp "attention decode benchmark"
  pydeps
  export PYTHONPATH="$build/python:$deps"
  timeout "${KILN_ATTNDECODE_TIMEOUT:-420}" "$py" "$root/bench/attention_decode.py" --kiln "$kiln" \
    --out "$out/attndecode" ${KILN_ATTNDECODE_BATCHES:+--batches "$KILN_ATTNDECODE_BATCHES"} \
    ${KILN_ATTNDECODE_CTXS:+--ctxs "$KILN_ATTNDECODE_CTXS"} >"$out/attndecode.txt" 2>&1
  rc=$?; grep -E '^\[ decode \]|Error|error' "$out/attndecode.txt" | tail -60; check $rc "bench/attention_decode.py"
fi
if want attndropout; then  # issue 36: attention with dropout in training, Kiln's plans against PyTorch's backends
  stamp "attention dropout benchmark"
  pydeps
  export PYTHONPATH="$build/python:$deps"
  timeout "${KILN_ATTNDROPOUT_TIMEOUT:-300}" "$py" "$root/bench/attention_dropout.py" --kiln "$kiln" \
    --out "$out/attndropout" ${KILN_ATTNDROPOUT_SEQS:+--seqs "$KILN_ATTNDROPOUT_SEQS"} >"$out/attndropout.txt" 2>&1
  rc=$?; grep -E '^\[ dropout \]|Error|error' "$out/attndropout.txt" | tail -40; check $rc "bench/attention_dropout.py"
fi
if want attnprefill; then  # issue 36: ragged (THD) prefill against PyTorch's backends on the padded batch
  stamp "attention ragged prefill benchmark"
  pydeps
  export PYTHONPATH="$build/python:$deps"
  timeout "${KILN_ATTNPREFILL_TIMEOUT:-300}" "$py" "$root/bench/attention_prefill.py" --kiln "$kiln" \
    --out "$out/attnprefill" ${KILN_ATTNPREFILL_SEQS:+--seqs "$KILN_ATTNPREFILL_SEQS"} >"$out/attnprefill.txt" 2>&1
  rc=$?; grep -E '^\[ prefill \]|Error|error' "$out/attnprefill.txt" | tail -40; check $rc "bench/attention_prefill.py"
fi
if want helpers; then  # issue 37: build helpers against in-process builds (the same verdicts), then their tune
  gtest tune_gpu_test 'Tuner.BuildHelpers*' 300
fi
if want tunewall; then  # issue 37: kiln tune --exhaustive walls with and without build helpers, per suite case
  stamp "tune walls with and without build helpers"
  suite_specs "$out/tunewall" ${KILN_TUNEWALL_IDS:-rms_norm_65536x1024 matmul_bias_gelu_2048x4096x16384}
  for spec in "$out"/tunewall/*.json; do
    name="$(basename "$spec" .json)"
    for h in ${KILN_TUNEWALL_HELPERS:-0 default}; do
      args=(--exhaustive --no-unfused); [ "$h" != default ] && args+=(--build-helpers "$h")
      t0=$(date +%s.%N)
      KILN_LOG=info timeout 200 "$kiln" tune "$spec" "${args[@]}" --store "$out/tunewall/$name-h$h.db" \
        >"$out/tunewall/$name-h$h.txt" 2>&1; rc=$?; check $rc "kiln tune $name helpers $h"
      echo "$name helpers $h: wall $(python3 -c "import time; print(round(time.time() - $t0, 2))") s (exit $rc)"
      grep -E "^winner|built in|built by" "$out/tunewall/$name-h$h.txt" | cut -c1-200
    done
  done
fi
if want buildscale; then  # issue 37: do runtime-compiled builds overlap across processes (they do not on threads)?
  stamp "build scaling across processes"
  suite_specs "$out/buildscale" rms_norm_65536x1024
  for n in ${KILN_BUILDSCALE_PROCS:-1 4}; do
    t0=$(date +%s.%N)
    for i in $(seq 1 "$n"); do
      timeout 120 "$kiln" tune "$out/buildscale/rms_norm_65536x1024.json" --exhaustive --no-isolate \
        --store "$out/buildscale/s$n-$i.db" >"$out/buildscale/p$n-$i.txt" 2>&1 &
    done
    wait
    echo "processes $n: wall $(python3 -c "import time; print(round(time.time() - $t0, 2))") s"
    for i in $(seq 1 "$n"); do grep -E "candidates|winner|tuned in|s\)$" "$out/buildscale/p$n-$i.txt" | tail -3; done
  done
fi
if want pyprofile; then  # issue 34: where a call from Python spends its time (py-spy, native frames), per contestant
  stamp "python call profile"
  pydeps
  export PYTHONPATH="$build/python:$deps"
  spy="$(ls "$deps"/py_spy-*.data/scripts/py-spy 2>/dev/null | head -1)"
  if [ -n "$spy" ]; then
    chmod +x "$spy"
    for what in op plan cpp; do
      # Native stacks cost py-spy about 10 ms a sample there (997 a second fell 20 s behind): 25 a second.
      timeout 100 "$spy" record --native --rate 25 --format raw -o "$out/pyspy-$what.txt" -- \
        "$py" "$root/bench/python/profile_call.py" --what $what --seconds 8 >"$out/pyspy-$what.log" 2>&1
      check $? "py-spy record ($what)"; tail -2 "$out/pyspy-$what.log"
    done
  else
    echo "pyprofile: no py-spy wheel in .pydeps" >>"$fails"
  fi
fi
for p in $phases; do  # suite:gemm suite:block ...: the benchmark suite's parts, in the order given
  [[ "$p" == suite:* ]] || continue
  stamp "benchmark suite: ${p#suite:}"
  pydeps  # the kiln package on PyTorch's path: the PyTorch side times Kiln's served plans too
  PYTHONPATH="$build/python:$deps" KILN_BUILD_DIR="$build" KILN_GIT_REVISION="$(sed -n 's/^revision=//p' "$pre/manifest")" \
    bash bench/run_suite.sh "$out/suite" "${p#suite:}" >>"$out/suite.txt" 2>&1; rc=$?
  tail -12 "$out/suite.txt"; check $rc "bench/run_suite.sh ${p#suite:}"
done
pywait  # a pybuild with no Python phase after it: its package still comes back (OUT/pykiln.tar.xz)
stamp "done"
if [ -s "$fails" ]; then sed 's/^/FAILED: /' "$fails"; exit 1; fi
echo "all phases passed"
