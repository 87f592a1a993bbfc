#!/usr/bin/env bash
# A fleet on one GPU machine (docs/fleet.md "The fleet on one machine"): one private PostgreSQL plan store, a
# service that queues what it could not serve, two `kiln worker`s draining the queue, a running Planner that
# swaps the new plans in through NOTIFY, and a fresh `kiln replay` reporting where each plan came from.
#   scripts/fleet-demo.sh KILN OUT_DIR
# KILN: the kiln binary. PostgreSQL comes from /usr/lib/postgresql, or from a pack made by `scripts/pg-pack.sh
# pack` and carried (.pgdist/): it is unpacked and used (KILN_PG_BIN for the server, KILN_LIBPQ for Kiln).
# Steps (each one's output in OUT_DIR, named by its number):
#  1. a server started (scripts/postgres.sh) in a fresh folder; the store is its database
#  2. `kiln run examples/X.json --store PG` for ten examples: store misses, each queued for re-tune (the
#     default --on-mismatch heuristics-and-queue); then the service, `kiln replay bench/fleet/service.json
#     --store PG --record-shapes`: the same graphs and the layer norm at ten other token counts, each served a
#     different number of times (recorded; a serving Planner opens the store read-only and queues nothing)
#  3. `kiln plans queue add examples/layer_norm.json --shapes RECORDED --hottest N`: the hot shapes queued, N
#     making the queue up to KILN_FLEET_JOBS (20) jobs
#  4. the watcher: `kiln replay bench/fleet/watch.json` in the background: each key once, a barrier waiting
#     for a notice per queued job (plans stored elsewhere), then each key again
#  5. two `kiln worker --drain --json` at once; then the watcher is waited for
#  6. the check: the workers' jobs (none done twice, none left queued, none failed), the watcher's notices and
#     the sources after its barrier, and a fresh `kiln replay bench/fleet/keys.json` (every key from the store)
# Exits 1 when a check fails, naming it in OUT_DIR/summary.txt.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kiln="${1:?usage: scripts/fleet-demo.sh KILN OUT_DIR}"
out="${2:?usage: scripts/fleet-demo.sh KILN OUT_DIR}"
mkdir -p "$out"; out="$(cd "$out" && pwd)"
cd "$root"
stamp() { echo "[$(date +%T)] $*" | tee -a "$out/summary.txt"; }
fail=0
bad() { stamp "FAILED: $*"; fail=1; }

if [ -f .pgdist/pg.tar.xz ] && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  bin="$(bash scripts/pg-pack.sh unpack /tmp/kiln-pgdist)" || { bad "unpacking .pgdist"; exit 1; }
  export KILN_PG_BIN="$bin"
  export KILN_LIBPQ="$(find /tmp/kiln-pgdist -name 'libpq.so.5' | head -1)"
fi
pg="$(mktemp -d /tmp/kiln-fleet-pg.XXXXXX)"; chmod 755 "$pg"
store="$(bash scripts/postgres.sh start "$pg" 2>"$out/1-postgres.txt")" || { cat "$out/1-postgres.txt"; bad "postgres start"; exit 1; }
trap 'bash scripts/postgres.sh stop "$pg" >/dev/null 2>&1' EXIT
stamp "1 store: $store"

stamp "2 runs that miss (each queues a re-tune), and a service that records its shapes"
for e in conv_bias_relu conv_dgrad conv_wgrad fp8_recipe fp8_scale layer_norm matmul_amax matmul_bias_gelu rms_norm \
  sdpa_fwd; do
  timeout 120 "$kiln" run "examples/$e.json" --store "$store" >>"$out/2-runs.txt" 2>&1 || bad "kiln run $e: exit $?"
done
timeout 300 "$kiln" replay bench/fleet/service.json --store "$store" --no-promote --record-shapes "$out/2-shapes.json" \
  --force --json >"$out/2-service.json" 2>"$out/2-service.err" || bad "service replay: exit $?"
"$kiln" plans queue --store "$store" >"$out/2-queue.txt" 2>&1
tail -1 "$out/2-queue.txt" | tee -a "$out/summary.txt"
"$kiln" plans queue --store "$store" --json >"$out/2-queue.json" 2>&1
missed=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$out/2-queue.json")

# The hottest recorded shapes not queued already (a run's miss of the spec's own shape is) make the queue up to
# ${KILN_FLEET_JOBS:-20} jobs.
python3 - "$out/2-shapes.json" "$out/2-queue.json" "$out/3-shapes-new.json" <<'PY'
import json, sys
shapes, queue, dst = (json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3])
queued = {(q["structure_sig"], q["shape_key"]) for q in queue}
shapes["shapes"] = [s for s in shapes["shapes"] if (s["structure"], s["shape_key"]) not in queued]
json.dump(shapes, open(dst, "w"), indent=1)
PY
hottest=$(( ${KILN_FLEET_JOBS:-20} - missed )); [ "$hottest" -ge 1 ] || hottest=1
stamp "3 the $hottest hottest recorded shapes queued"
"$kiln" plans queue add examples/layer_norm.json --shapes "$out/3-shapes-new.json" --hottest "$hottest" --store "$store" \
  >"$out/3-queue-add.txt" 2>&1 || bad "queue add: exit $?"
tail -1 "$out/3-queue-add.txt" | tee -a "$out/summary.txt"
"$kiln" plans queue --store "$store" --json >"$out/3-queue.json" 2>&1
queued=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$out/3-queue.json")
stamp "3 queue holds $queued jobs"

stamp "4 watcher started (a running Planner, waiting for a notice per queued job)"
# bench/fleet/watch.json with its barrier waiting for as many notices as there are jobs (each job stores a plan at
# least), and its specs' paths made absolute (the copy lives in OUT_DIR).
python3 - "$root/bench/fleet/watch.json" "$out/4-watch-trace.json" "$queued" <<'PY'
import json, os, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = json.load(open(src))
for r in t["requests"]:
    if "spec" in r: r["spec"] = os.path.normpath(os.path.join(os.path.dirname(src), r["spec"]))
    if r.get("wait") == "notices": r["count"] = n
json.dump(t, open(dst, "w"), indent=1)
PY
timeout 300 "$kiln" replay "$out/4-watch-trace.json" --store "$store" --no-promote --json >"$out/4-watch.json" \
  2>"$out/4-watch.err" &
watcher=$!
sleep "${KILN_FLEET_WATCH_HEAD_START:-20}"  # its first pass (every key once, heuristics) before any plan lands

stamp "5 two workers"
for w in 1 2; do
  timeout 240 "$kiln" worker --store "$store" --drain --json --name "worker$w" --candidate-budget-ms 20 --top-k 32 \
    --job-budget 60 >"$out/5-worker$w.json" 2>"$out/5-worker$w.err" &
  eval "w$w=\$!"
done
wait "$w1"; r1=$?; wait "$w2"; r2=$?
stamp "5 workers exited $r1, $r2"
[ $r1 -eq 0 ] && [ $r2 -eq 0 ] || bad "a worker exited non-zero"
wait "$watcher"; rw=$?
stamp "4 watcher exited $rw"
[ $rw -eq 0 ] || bad "watcher replay: exit $rw"

stamp "6 fresh replay of every key"
timeout 300 "$kiln" replay bench/fleet/keys.json --store "$store" --no-promote --json >"$out/6-replay.json" \
  2>"$out/6-replay.err" || bad "fresh replay: exit $?"
"$kiln" plans queue --store "$store" >"$out/6-queue.txt" 2>&1
"$kiln" plans ls --store "$store" >"$out/6-plans.txt" 2>&1
python3 - "$out" "$queued" <<'PY' | tee -a "$out/summary.txt"
import json, sys, collections
out, queued = sys.argv[1], int(sys.argv[2])
problems = []
jobs = collections.Counter()
done = failed = 0
for w in (1, 2):
    try:
        rep = json.load(open(f"{out}/5-worker{w}.json"))
    except Exception as ex:
        problems.append(f"worker{w}: no JSON report ({ex})"); continue
    mine = rep.get("jobs", [])
    print(f"worker{w}: {len(mine)} jobs: " + ", ".join(f"{j.get('graph_name')}/{j.get('shape_key') or '-'} {j.get('end')}" for j in mine))
    for j in mine:
        if j.get("end") == "done":
            done += 1
            jobs[(j.get("structure_sig"), j.get("shape_key"))] += 1
        else:
            failed += 1
twice = [k for k, n in jobs.items() if n > 1]
print(f"jobs queued {queued}, done {done} ({len(jobs)} distinct), done twice {len(twice)}, not done {failed}")
if twice: problems.append(f"{len(twice)} jobs done twice")
if done != queued or len(jobs) != queued: problems.append(f"{done} jobs done of {queued} queued")
w = json.load(open(f"{out}/4-watch.json"))
for n in w.get("notice_waits", []):
    print(f"watcher: waited {n['waited_s']:.1f} s for {n['wanted']} notices, saw {n['seen']}{' (timed out)' if n['timed_out'] else ''}; sources after: {n['sources_after']}")
    if n["timed_out"]: problems.append("the watcher's notices barrier timed out")
    # "segments": a chain dropped when its parts' new plans were noticed, made again of them (the fresh replay
    # below checks that every part comes from the store).
    if set(n["sources_after"]) - {"store", "memory", "segments"}: problems.append(f"after the notices the watcher still served {n['sources_after']}")
print("watcher stats: " + w.get("stats", ""))
f = json.load(open(f"{out}/6-replay.json"))
print("fresh replay by source: " + ", ".join(f"{k} {v['calls']}" for k, v in f["by_source"].items() if v["calls"]))
# Every key from the store: its own record, or (a graph cuDNN cannot fuse whole) its segments, each one stored.
for s in f["by_shape"]:
    why = s.get("first_why", "")
    stored_segments = s["first_source"] == "segments" and "from store" in why and not any(
        f"from {src}" in why for src in ("heuristics", "bucket", "dynamic", "padded", "split"))
    if s["first_source"] != "store" and not stored_segments:
        problems.append(f"the fresh replay served {s['graph']} {s['shape']} from {s['first_source']}: {why}")
    elif stored_segments:
        print(f"fresh replay: {s['graph']} {s['shape']} as stored segments: {why}")
print("fleet demo: " + ("PASSED" if not problems else "FAILED: " + "; ".join(problems)))
sys.exit(1 if problems else 0)
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
tail -3 "$out/6-queue.txt" | tee -a "$out/summary.txt"
exit $fail
