#!/usr/bin/env bash
# Host tier: the benchmark suite's report and the main job's report, on committed data and fixtures.
#  - bench/report.py over the committed H200 part files: every goal of issue 15 is reported with a ratio,
#    met/missed agrees with the ratio and target, the merged file keeps each case's Kiln and PyTorch sides;
#    an unreadable part is exit 2 naming it; a part with a failed measurement says "not measured";
#  - scripts/main_report.py: a stored plan that loaded and verified passes, a segmented one counts when
#    every segment came from the store, a plan served from elsewhere or a failed tune fails (exit 1);
#  - bench/suite/kiln_side.py and bench/run_suite.sh refuse bad arguments with exit 2.
#   tests/bench_scripts_check.sh SOURCE_DIR
set -u
root="${1:?usage: bench_scripts_check.sh SOURCE_DIR}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
P="$root/bench/results/h200/parts"
parts=("$P"/conv-kiln.json "$P"/conv-torch.json "$P"/gemm-kiln.json "$P"/gemm-torch.json "$P"/attention-kiln.json
       "$P"/attention-torch.json "$P"/block-kiln.json "$P"/block-torch.json "$P"/runtime-kiln.json
       "$P"/coldstart-kiln.json "$P"/cases-kiln.json "$P"/cases-torch.json "$P"/cases-norms-kiln.json
       "$P"/cases-norms-torch.json "$P"/why.json)
python3 "$root/bench/report.py" "${parts[@]}" --out-dir "$tmp/out" --markdown "$tmp/B.md" >"$tmp/report.log" 2>&1 \
  || { cat "$tmp/report.log"; fail "report.py on the committed parts: exit $?"; }
python3 - "$tmp/out/summary.json" "$tmp/out/suite.json" "$tmp/B.md" <<'PY' || exit 1
import json, sys
s = json.load(open(sys.argv[1])); m = json.load(open(sys.argv[2])); md = open(sys.argv[3]).read()
goals = s["goals"]
assert len(goals) == 28, f"{len(goals)} goals, expected 28 (one per goal of issue 15, the block per shape)"
for g in goals:
    assert g["ratio"] is not None and g["met"] is not None, f"goal not measured in the committed run: {g['name']}"
    ok = g["ratio"] <= g["target"] if g.get("direction") == "le" else g["ratio"] >= g["target"]
    assert ok == g["met"], f"{g['name']}: met={g['met']} but ratio {g['ratio']} against target {g['target']}"
    if not g["met"]:
        assert g["name"] in md.split("Missed goals", 1)[1], f"missed goal {g['name']} not listed under Missed goals"
byid = {c["id"]: c for c in m["cases"]}
c = byid["matmul_amax_8192x8192x8192"]
assert c["kiln"]["tuned_ms"] and c["torch"]["eager_ms"], "a case lost its Kiln or its PyTorch side in the merge"
assert c["kiln"]["tune_wall_s"] < 60, "the later (re-measured) part must win: cases-kiln.json re-tuned this case"
assert m["meta"].get("git_revision") and m["meta"].get("gpu") == "NVIDIA H200", "meta lacks the revision or GPU"
PY
[ $? -eq 0 ] || fail "summary checks"
echo '{not json' >"$tmp/bad.json"
python3 "$root/bench/report.py" "$tmp/bad.json" --out-dir "$tmp/o2" --markdown "$tmp/o2.md" >"$tmp/bad.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "bad.json" "$tmp/bad.log" || fail "an unreadable part: exit $rc, expected 2 naming the file"
cat >"$tmp/partial.json" <<'J'
{"meta": {}, "limits": {}, "cases": [{"family": "layer_norm", "name": "16384x8192", "id": "layer_norm_16384x8192",
  "kiln": {}, "torch": {}, "errors": {"kiln_tune": "kiln tune exit 3: no GPU"}}]}
J
python3 "$root/bench/report.py" "$tmp/partial.json" --out-dir "$tmp/o3" --markdown "$tmp/o3.md" >/dev/null 2>&1 \
  || fail "a part with only failed measurements must still give a report"
grep -q "not measured" "$tmp/o3.md" && grep -q "kiln tune exit 3: no GPU" "$tmp/o3.md" \
  || fail "a failed measurement must read 'not measured' with its error"

# A failed tune's wall time is no tuning cost; times of 0 or less are not measurements; the cold-start table's
# runtime-compiled ratio divides by that plan's own load.
cat >"$tmp/failed.json" <<'J'
{"meta": {}, "limits": {}, "cases": [{"family": "layer_norm", "name": "16384x8192", "id": "layer_norm_16384x8192",
  "kiln": {"tune_wall_s": 0.017, "tune_exit": 3}, "torch": {"compile_time_s": 4.0, "eager_ms": -5},
  "errors": {"kiln_tune": "kiln tune exit 3: no GPU"}}],
 "cold_start": {"load_ms": 0.5, "runtime_compiled_build_ms": 100.0, "runtime_compiled_load_ms": 5.0}}
J
python3 "$root/bench/report.py" "$tmp/failed.json" --out-dir "$tmp/o4" --markdown "$tmp/o4.md" >/dev/null 2>&1 \
  || fail "a part with a failed tune must still give a report"
python3 - "$tmp/o4/summary.json" "$tmp/o4.md" <<'PY' || fail "failed tunes, bad times and the cold-start ratio"
import json, sys
g = {x["name"]: x for x in json.load(open(sys.argv[1]))["goals"]}
md = open(sys.argv[2]).read()
assert g["tuning cost vs torch.compile (every case)"]["ratio"] is None, "a failed tune counted as tuning cost"
assert "-5.0" not in md and "eager -" not in md, "a negative time was printed as a measurement"
assert "| 20.0x" in md or "20.0x" in md.split("## Cold start", 1)[1].split("##", 1)[0], "runtime-compiled build/load"
PY
echo '{"cases": 5}' >"$tmp/shape.json"
python3 "$root/bench/report.py" "$tmp/shape.json" --out-dir "$tmp/o5" --markdown "$tmp/o5.md" >"$tmp/shape.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "shape.json: 'cases' is a int" "$tmp/shape.log" && [ ! -e "$tmp/o5" ] \
  || { cat "$tmp/shape.log"; fail "a part of the wrong shape: exit $rc, expected 2 naming the file, nothing written"; }
: >"$tmp/outfile"
python3 "$root/bench/report.py" "$tmp/partial.json" --out-dir "$tmp/outfile" --markdown "$tmp/o8.md" >"$tmp/of.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "out-dir $tmp/outfile exists and is not a folder" "$tmp/of.log" && [ ! -e "$tmp/o8.md" ] \
  || { cat "$tmp/of.log"; fail "--out-dir naming a file: exit $rc, expected 2 naming it, nothing written"; }
echo '{"cases": [{"id": "a"}, {"id": "a"}, {"id": "b"}]}' >"$tmp/dup.json"
python3 "$root/bench/report.py" "$tmp/dup.json" --out-dir "$tmp/o7" --markdown "$tmp/o7.md" >"$tmp/dup.log" 2>&1
grep -q "dup.json: case id(s) a appear more than once; the last one counts" "$tmp/dup.log" \
  || { cat "$tmp/dup.log"; fail "a duplicate case id in one part must be warned about, naming the file and the id"; }
mkdir -p "$tmp/mdfolder"
python3 "$root/bench/report.py" "$tmp/partial.json" --out-dir "$tmp/o6" --markdown "$tmp/mdfolder" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && [ ! -e "$tmp/o6" ] || fail "--markdown naming a folder: exit $rc, expected 2 before anything is written"

# The main job's report.
d="$tmp/mj"; mkdir -p "$d"
echo '[{"summary": {"best_ms": 0.02, "heuristic_ms": 0.03}}]' >"$d/tune-a.json"; echo 0 >"$d/tune-a.rc"
echo "a: plan eng1 from store (workspace 0 B, 2.5 ms to obtain), ran in 0.100 ms" >"$d/load-a.txt"; echo 0 >"$d/load-a.rc"
echo "a: plan eng1 from heuristics (workspace 0 B, 120.5 ms to obtain), ran in 0.100 ms" >"$d/build-a.txt"
cp "$d/tune-a.json" "$d/tune-s.json"; echo 0 >"$d/tune-s.rc"; echo 0 >"$d/load-s.rc"
printf 's: plan 2 fused segments from segments (workspace 0 B, 9.0 ms to obtain), ran in 0.1 ms\n  segment s/0: eng1 from store\n  segment s/1: eng2 from store\n' >"$d/load-s.txt"
python3 "$root/scripts/main_report.py" "$d" a s >"$tmp/mj.log" 2>&1 || { cat "$tmp/mj.log"; fail "main_report: stored and verified plans must pass"; }
grep -q "1.50x" "$tmp/mj.log" && grep -q "store (2 segments)" "$tmp/mj.log" || { cat "$tmp/mj.log"; fail "main_report: gain or segments missing"; }
sed -i 's/from store/from heuristics/' "$d/load-a.txt"
python3 "$root/scripts/main_report.py" "$d" a >"$tmp/mj2.log" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "served from heuristics, not the store" "$tmp/mj2.log" || { cat "$tmp/mj2.log"; fail "main_report: a plan not from the store must fail (exit $rc)"; }
echo 3 >"$d/tune-b.rc"
python3 "$root/scripts/main_report.py" "$d" b >"$tmp/mj3.log" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "kiln tune exit 3" "$tmp/mj3.log" || { cat "$tmp/mj3.log"; fail "main_report: a failed tune must fail (exit $rc)"; }

# Argument errors.
python3 "$root/bench/suite/kiln_side.py" --kiln /bin/true --out "$tmp/x.json" --families bogus >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "kiln_side.py --families bogus: exit $rc, expected 2"
KILN_BUILD_DIR="$tmp/nowhere" bash "$root/bench/run_suite.sh" "$tmp/s" conv >"$tmp/rs.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "no $tmp/nowhere/kiln" "$tmp/rs.log" || fail "run_suite.sh without a build: exit $rc, expected 2 naming kiln"
bash "$root/bench/run_suite.sh" "$tmp/s2" conv bogus >"$tmp/rs2.log" 2>&1; rc=$?
[ $rc -eq 2 ] && [ ! -e "$tmp/s2" ] || fail "run_suite.sh with an unknown part: exit $rc, expected 2 before any part runs"
bash "$root/bench/run_suite.sh" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "run_suite.sh without arguments: exit $rc, expected 2"
mkdir -p "$tmp/nogpu"; printf '#!/bin/sh\necho "no usable CUDA device" >&2; exit 3\n' >"$tmp/nogpu/kiln"; chmod +x "$tmp/nogpu/kiln"
KILN_BUILD_DIR="$tmp/nogpu" bash "$root/bench/run_suite.sh" "$tmp/s3" conv >"$tmp/rs3.log" 2>&1; rc=$?
[ $rc -eq 3 ] && grep -q "no usable GPU" "$tmp/rs3.log" && [ ! -e "$tmp/s3" ] \
  || { cat "$tmp/rs3.log"; fail "run_suite.sh without a GPU: exit $rc, expected 3 saying so, nothing written"; }
echo "bench scripts: report over the committed run, failure paths and argument errors checked"
