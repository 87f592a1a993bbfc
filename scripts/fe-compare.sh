#!/usr/bin/env bash
# Before/after of a cuDNN Frontend move, on the GPU machine, in one run of the same commands for both builds:
#   scripts/fe-compare.sh OUT_DIR NAME=BUILD_DIR [NAME=BUILD_DIR ...] [-- EXAMPLE...]
# For each build and each example (default: every examples/*.json):
#  - tune: `kiln tune --no-unfused --json` (heuristic's choice and best, median ms; candidates; wall s)
#  - build vs load: benchmarks/plan_load_bench (heuristic plan build, store load = lookup + deserialize)
#  - first result in a new process: `kiln run --store` (a stored plan) and without a store (heuristics),
#    wall clock of the whole process
# Writes OUT_DIR/<name>/... logs and OUT_DIR/compare.json (one row per build and example); prints a table.
# Exits non-zero when a step failed for a build (the table still prints what was measured).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/fe-compare.sh OUT_DIR NAME=BUILD_DIR... [-- EXAMPLE...]}"; shift
builds=(); examples=()
while (($#)); do
  if [ "$1" = "--" ]; then shift; examples=("$@"); break; fi
  builds+=("$1"); shift
done
[ ${#builds[@]} -gt 0 ] || { echo "fe-compare: name at least one NAME=BUILD_DIR" >&2; exit 2; }
if [ ${#examples[@]} -eq 0 ]; then for f in "$root"/examples/*.json; do examples+=("$(basename "$f" .json)"); done; fi
mkdir -p "$out"; out="$(cd "$out" && pwd)"
cd "$root"
rc=0
rows="$out/rows.jsonl"; : >"$rows"
now() { date +%s.%N; }
for b in "${builds[@]}"; do
  name="${b%%=*}"; dir="${b#*=}"
  [ -x "$dir/kiln" ] || { echo "fe-compare: no kiln in $dir" >&2; rc=1; continue; }
  d="$out/$name"; mkdir -p "$d"; store="$d/store.db"; rm -f "$store"*
  echo "[$(date +%T)] $name: $("$dir/kiln" doctor 2>&1 | grep -i 'frontend' | head -1)"
  for e in "${examples[@]}"; do
    spec="examples/$e.json"
    t0=$(now)
    timeout 120 "$dir/kiln" tune "$spec" --no-unfused --json --store "$store" --candidate-budget-ms 50 \
      >"$d/tune_$e.json" 2>"$d/tune_$e.err"
    trc=$?; t1=$(now)
    [ $trc -eq 0 ] || { echo "  $e: tune exit $trc: $(tail -1 "$d/tune_$e.err")"; rc=1; }
    # First result in a new process: a stored plan, then heuristics (no store).
    t2=$(now); timeout 60 "$dir/kiln" run "$spec" --store "$store" >"$d/run_store_$e.txt" 2>&1; r1=$?; t3=$(now)
    t4=$(now); timeout 60 "$dir/kiln" run "$spec" >"$d/run_heur_$e.txt" 2>&1; r2=$?; t5=$(now)
    [ $r1 -eq 0 ] && [ $r2 -eq 0 ] || { echo "  $e: run exit $r1 (store) $r2 (heuristics)"; rc=1; }
    python3 - "$d/tune_$e.json" "$name" "$e" "$t0" "$t1" "$t2" "$t3" "$t4" "$t5" "$r1" "$r2" >>"$rows" <<'EOF'
import json, sys
path, name, ex, t0, t1, t2, t3, t4, t5, r1, r2 = sys.argv[1:]
row = {"build": name, "example": ex, "tune_wall_s": float(t1) - float(t0),
       "first_result_store_s": float(t3) - float(t2) if r1 == "0" else None,
       "first_result_heuristics_s": float(t5) - float(t4) if r2 == "0" else None}
try:
    j = json.load(open(path))
    reps = j if isinstance(j, list) else [j]
    s = reps[0].get("summary", {})
    row.update(best_ms=s.get("best_ms"), heuristic_ms=s.get("heuristic_ms"), winner=reps[0].get("winner"),
               candidates=len(reps[0].get("candidates", [])))
except Exception as ex_:
    row["tune_error"] = str(ex_)[:200]
print(json.dumps(row))
EOF
  done
  timeout 240 "$dir/benchmarks/plan_load_bench" --reps 5 --shapes 50 $(printf 'examples/%s.json ' "${examples[@]}") \
    >"$d/load_bench.log" 2>&1 || { echo "  plan_load_bench exit $?"; rc=1; }
  tail -1 "$d/load_bench.log" >"$d/load_bench.json"
done
python3 - "$out" "$rows" "${builds[@]}" <<'EOF'
import json, sys, os
out, rows_path, builds = sys.argv[1], sys.argv[2], [b.split("=")[0] for b in sys.argv[3:]]
rows = [json.loads(l) for l in open(rows_path) if l.strip()]
load = {}
for b in builds:
    try:
        j = json.loads(open(os.path.join(out, b, "load_bench.json")).read())
        for s in j.get("per_graph", []):
            load[(b, s.get("graph"))] = s
    except Exception:
        pass
for r in rows:  # plan_load_bench names graphs by the spec's "name"
    gname = json.load(open(os.path.join("examples", r["example"] + ".json"))).get("name", r["example"])
    s = load.get((r["build"], gname), {})
    r["build_ms"] = s.get("build_ms_median"); r["load_ms"] = s.get("load_ms_median")
json.dump(rows, open(os.path.join(out, "compare.json"), "w"), indent=1)
f = lambda v, fmt: (fmt % v) if isinstance(v, (int, float)) else "-"
print("%-18s %-8s %5s %10s %10s %9s %9s %8s %10s %10s" % ("example", "build", "cands", "heur ms", "best ms",
      "build ms", "load ms", "tune s", "1st(store)", "1st(heur)"))
for r in sorted(rows, key=lambda r: (r["example"], builds.index(r["build"]))):
    print("%-18s %-8s %5s %10s %10s %9s %9s %8s %10s %10s" % (r["example"], r["build"], r.get("candidates", "-"),
          f(r.get("heuristic_ms"), "%.4f"), f(r.get("best_ms"), "%.4f"), f(r.get("build_ms"), "%.2f"),
          f(r.get("load_ms"), "%.3f"), f(r.get("tune_wall_s"), "%.1f"), f(r.get("first_result_store_s"), "%.3f"),
          f(r.get("first_result_heuristics_s"), "%.3f")))
EOF
exit $rc
