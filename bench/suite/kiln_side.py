#!/usr/bin/env python3
"""The benchmark suite's Kiln side: everything measured through Kiln's own binaries, as JSON.

  python3 bench/suite/kiln_side.py --kiln build/kiln --out FILE [--families f1,f2] [--cases id1,id2]
                                   [--block] [--coldstart] [--dynamic] [--capture] [--work DIR]

Parts (each optional; FILE is rewritten after every step, so a run stopped at its time limit keeps what
it finished; an error is recorded under the entry's "errors" and the run goes on):
  cases      for each case of shapes.cases() (filtered by --families/--cases; "none" selects none):
             `kiln tune SPEC --json --store STORE` in a new process. Kiln's figures come from its tuner:
             every engine configuration cuDNN offers timed by kiln::Timer (median of L2-flushed samples, the
             stream held by a spinning kernel while each sample is enqueued; docs/measure.md), checked
             against the reference; the unfused alternative timed the same way for multi-node graphs.
               tuned_ms (the winner), heuristic_ms (cuDNN's first choice), best_ms, worst_ms, unfused_ms,
               fusion_choice (the faster side by the tuner's fusion report), served_ms (what Kiln runs:
               the fused winner; running the unfused chain in service is not built),
               tune_wall_s (process start to exit), candidates, passed, winner;
             matmul_amax cases also tune the plain matmul of the same shape: plain_ms.
  block      the transformer block (shapes.block_specs) at each shapes.BLOCK_SHAPES: every step tuned into
             the store (`kiln tune`), then benchmarks/block_bench replays the chain from one CUDA graph.
  coldstart  benchmarks/plan_load_bench over the examples (heuristic build vs store load in one process,
             and 100 stored shapes loaded at start); benchmarks/planner_cold_start in new processes; and the
             wall time from process start to the first results of the whole example set (`kiln replay` of a
             trace asking for each of examples/*.json once: obtain, execute, sync, through one Planner)
             with the store filled by `kiln tune` and without one (every plan from cuDNN's heuristics).
  dynamic    bench/planner_bench.py (issue 12's runtime benchmark: stopgaps, promotion, cold builds).
  capture    benchmarks/capture_bench (issue 13: one op and a chain of ten, stream vs CUDA graph).
Standard library only. Needs a GPU for anything but argument checks.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import shapes  # noqa: E402

T0 = time.monotonic()


def log(msg):
    print(f"[kiln {time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout, env=None):
    """(exit code, stdout, stderr, wall seconds); 124 on a timeout."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return 124, out, err, time.monotonic() - t0


class Results:
    def __init__(self, path, argv):
        self.path = path
        self.data = {"meta": {"argv": argv, "side": "kiln", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                     "cases": [], "block": [], "errors": {}}

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1)
        os.replace(tmp, self.path)


def write_spec(work, spec):
    path = os.path.join(work, spec["name"] + ".json")
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    return path


def tune(kiln, spec_path, store, timeout, extra=()):
    """Runs `kiln tune --json`; returns (figures dict, error string or None)."""
    rc, out, err, wall = run([kiln, "tune", spec_path, "--json", "--store", store, *extra], timeout)
    # A failed tune's wall time is no tuning cost: it is kept under another name.
    fig = {"tune_wall_s" if rc == 0 else "failed_tune_wall_s": round(wall, 3), "tune_exit": rc}
    base = os.path.splitext(spec_path)[0]
    for ext, text in ((".tune.json", out), (".tune.err", err)):  # the raw evidence, beside the spec
        with open(base + ext, "w") as f:
            f.write(text)
    if rc != 0:
        tail = (err or out).strip().splitlines()[-3:]
        return fig, f"kiln tune exit {rc}{' (timed out)' if rc == 124 else ''}: {' | '.join(tail)}"
    try:
        reports = json.loads(out)
    except ValueError as e:
        return fig, f"kiln tune --json output unreadable: {e}"
    if isinstance(reports, dict):
        reports = [reports]
    # One report per tuned graph; a graph Kiln runs as several fused segments has one per segment, run one
    # after the other: their times add up.
    tuned = heur = best = worst = unfused = served = 0.0
    have_heur = have_worst = True
    unfused_known = True
    choice = "fused"
    cands = passed = 0
    winners = []
    for r in reports:
        s = r.get("summary", {})
        if s.get("best_ms") is None:
            return fig, f"no correct plan: {s.get('error', 'unknown')}"
        tuned += s["best_ms"]
        best += s["best_ms"]
        if s.get("heuristic_ms") is None:
            have_heur = False
        else:
            heur += s["heuristic_ms"]
        if s.get("worst_ms") is None:
            have_worst = False
        else:
            worst += s["worst_ms"]
        cands += len(r.get("candidates", []))
        passed += int(s.get("counts", {}).get("Passed", 0))
        winners.append(r.get("winner"))
        fu = r.get("fusion")
        if fu and fu.get("unfused_available") and fu.get("unfused", {}).get("median_ms") is not None:
            unfused += fu["unfused"]["median_ms"]
            if fu.get("decision") == "unfused":
                choice = "unfused"
        else:
            unfused_known = False
        # What the Planner serves for this segment: the unfused chain where the tune stored that decision (its
        # fusion record; docs/runtime.md), else the fused winner.
        if fu and fu.get("decision") == "unfused" and (fu.get("unfused") or {}).get("median_ms") is not None:
            served += fu["unfused"]["median_ms"]
        else:
            served += s["best_ms"]
    fig.update({"tuned_ms": tuned, "best_ms": best, "heuristic_ms": heur if have_heur else None,
                "worst_ms": worst if have_worst else None, "unfused_ms": unfused if unfused_known else None,
                "fusion_choice": choice, "segments": len(reports), "candidates": cands, "passed": passed,
                "winner": winners[0] if len(winners) == 1 else winners})
    # Per segment, what the Planner serves: the fused winner, or the unfused chain where the tune decided for it
    # (fusion_choice says whether any segment did).
    fig["served_ms"] = served
    return fig, None


def part_cases(a, res, store, work):
    sel = [c for c in shapes.cases()
           if (not a.families or c["family"] in a.families) and (not a.cases or c["id"] in a.cases)]
    plain_cache = {}
    for c in sel:
        entry = {k: v for k, v in c.items() if k != "spec"}
        entry["kiln"], entry["errors"] = {}, {}
        res.data["cases"].append(entry)
        log(f"tune {c['id']}")
        fig, err = tune(a.kiln, write_spec(work, c["spec"]), store, a.timeout)
        entry["kiln"].update(fig)
        if err:
            entry["errors"]["kiln_tune"] = err
            log(f"  {err}")
        if c["family"] == "matmul":
            plain_cache[c["id"]] = (fig, err)
        if c["family"] == "matmul_amax":
            p = c["params"]
            plain = shapes.kiln_spec({"family": "matmul", "id": f"matmul_{p['m']}x{p['k']}x{p['n']}", "params": p})
            if plain["name"] not in plain_cache:  # the plain matmul case of this shape may be tuned already
                plain_cache[plain["name"]] = tune(a.kiln, write_spec(work, plain), store, a.timeout, ["--no-unfused"])
            fig2, err2 = plain_cache[plain["name"]]
            entry["kiln"]["plain_ms"] = fig2.get("tuned_ms")
            if err2:
                entry["errors"]["kiln_tune_plain"] = err2
        log(f"  {entry['kiln'].get('served_ms')} ms ({entry['kiln'].get('tune_wall_s')} s)")
        res.save()


def part_block(a, res, store, work):
    bench = os.path.join(a.build, "benchmarks", "block_bench")
    for (batch, tokens) in shapes.BLOCK_SHAPES:
        bufs, steps = shapes.block_specs(batch, tokens)
        entry = {"batch": batch, "tokens": tokens, "flops": shapes.block_flops(batch, tokens),
                 "weight_bytes": shapes.block_weight_bytes(), "kiln": {"steps_tune": []}, "errors": {}}
        res.data["block"].append(entry)
        desc = {"name": f"block b{batch} t{tokens}", "buffers": bufs, "steps": []}
        for s in steps:
            path = write_spec(work, s["spec"])
            desc["steps"].append({"spec_file": path, "bind": s["bind"]})
            log(f"tune block step {s['spec']['name']}")
            fig, err = tune(a.kiln, path, store, a.timeout)
            entry["kiln"]["steps_tune"].append({"graph": s["spec"]["name"], **fig})
            if err:
                entry["errors"][f"tune {s['spec']['name']}"] = err
                log(f"  {err}")
            res.save()
        desc_path = os.path.join(work, f"block_b{batch}_t{tokens}.json")
        with open(desc_path, "w") as f:
            json.dump(desc, f, indent=1)
        out = os.path.join(work, f"block_b{batch}_t{tokens}.out.json")
        rc, so, se, wall = run([bench, "--block", desc_path, "--store", store, "--out", out], a.timeout)
        log(f"block_bench b{batch} t{tokens}: exit {rc}\n{so}{se[-1500:]}")
        if rc == 0:
            with open(out) as f:
                bb = json.load(f)
            entry["kiln"].update({k: bb[k] for k in ("graph_ms", "graph_wall_ms", "stream_ms", "stream_wall_ms",
                                                     "sum_of_steps_ms", "steps", "capture_stats")})
        else:
            entry["errors"]["block_bench"] = f"exit {rc}: {(se or so).strip()[-500:]}"
        res.save()


def part_coldstart(a, res, store, work):
    cs = res.data.setdefault("cold_start", {})
    examples = sorted(os.path.join(ROOT, "examples", f) for f in os.listdir(os.path.join(ROOT, "examples"))
                      if f.endswith(".json"))
    # In one process: heuristic build vs store load per example; 100 stored shapes loaded at start.
    bench = os.path.join(a.build, "benchmarks", "plan_load_bench")
    load_specs = [os.path.join(ROOT, "examples", e + ".json") for e in
                  ("layer_norm", "conv_bias_relu", "matmul_bias_gelu", "matmul_amax", "rms_norm", "sdpa_fwd")]
    rc, so, se, _ = run([bench, "--reps", "5", "--shapes", "100", *load_specs], a.timeout * 2)
    log(f"plan_load_bench exit {rc}\n{so}{se[-800:]}")
    if rc == 0 and so.strip():
        pl = json.loads(so.strip().splitlines()[-1])
        cs["plan_load_bench"] = pl
        per = {g["graph"]: g for g in pl.get("per_graph", [])}
        # Build and load of the same graph, in one warm process (medians of --reps): conv_bias_relu has a
        # precompiled engine (heuristics + build); the matmul epilogues', norms' and SDPA's engines are
        # runtime-compiled (NVRTC; after the first build in a process cuDNN reuses the compiled kernel).
        if "conv_bias_relu" in per:
            g = per["conv_bias_relu"]
            cs.update({"load_ms": g["load_ms_median"], "heuristic_build_ms": g["build_ms_median"],
                       "heuristic_build_graph": "conv_bias_relu (precompiled engine)",
                       "heuristic_build_over_load": g["build_over_load"]})
        rt = [g for n, g in per.items() if n in ("matmul_bias_gelu", "matmul_amax", "layer_norm", "rms_norm", "sdpa_fwd")]
        if rt:
            worst = min(rt, key=lambda g: g["build_over_load"])
            cs.update({"runtime_compiled_build_ms": worst["build_ms_median"], "runtime_compiled_load_ms": worst["load_ms_median"],
                       "runtime_compiled_graph": worst["graph"], "runtime_compiled_build_over_load": worst["build_over_load"],
                       "runtime_compiled_per_graph": {g["graph"]: g["build_over_load"] for g in rt}})
        st = pl.get("startup") or {}
        if st.get("loaded"):
            cs["load_100_ms"] = st.get("load_all_ms")
            cs["build_100_ms"] = st.get("build_all_ms")
            cs["plans_at_start"] = st.get("loaded")
    else:
        res.data["errors"]["plan_load_bench"] = f"exit {rc}: {(se or so).strip()[-500:]}"
    res.save()
    # Process start to the first results of the whole example set: with a store filled by `kiln tune`,
    # and without one (every plan from cuDNN's heuristics).
    log("tuning the examples into a store for the start-up runs")
    ex_store = os.path.join(work, "examples_store.db")
    rc, so, se, wall = run([a.kiln, "tune", *examples, "--store", ex_store], a.timeout * 4)
    cs["examples_tune_wall_s"] = round(wall, 2)
    cs["examples_tune_exit"] = rc
    # The Planner serves one plan per graph: fp8_recipe, which cuDNN cannot fuse whole (`kiln run` runs it
    # as two segments), is left out of the trace.
    served = [e for e in examples if os.path.basename(e) != "fp8_recipe.json"]
    cs["first_result_graphs"] = [os.path.basename(e)[:-5] for e in served]
    trace = os.path.join(work, "examples_trace.json")
    with open(trace, "w") as f:
        json.dump({"format": "kiln-trace", "version": 1,
                   "requests": [{"spec": os.path.relpath(e, work)} for e in served]}, f, indent=1)
    for label, extra in (("with_store", ["--store", ex_store]), ("without_store", [])):
        walls = []
        for _ in range(3):
            rc, so, se, wall = run([a.kiln, "replay", trace, "--json", "--new-shapes", "build-now", *extra], a.timeout)
            walls.append(wall)
            if rc != 0:
                res.data["errors"][f"first_result_{label}"] = f"kiln replay exit {rc}: {(se or so).strip()[-400:]}"
            else:
                try:
                    cs[f"replay_{label}"] = json.loads(so)
                except ValueError:
                    pass
        cs[f"first_result_{label}_s"] = statistics.median(walls)
        log(f"kiln replay of the examples {label}: {walls}")
    res.save()
    # Where a new process's time goes (issue 12 item 8), conv plan from the store.
    cold = os.path.join(a.build, "benchmarks", "planner_cold_start")
    rows = []
    for mode in ("planner", "parts"):
        for _ in range(3):
            rc, so, se, _ = run([cold, "--store", ex_store, "--spec", os.path.join(ROOT, "examples", "conv_bias_relu.json"),
                                 "--mode", mode, "--json"], a.timeout)
            if rc == 0 and so.strip():
                try:
                    rows.append({"mode": mode, **json.loads(so.strip().splitlines()[-1])})
                except ValueError:
                    rows.append({"mode": mode, "raw": so[-800:]})
            else:
                res.data["errors"][f"planner_cold_start {mode}"] = f"exit {rc}: {(se or so).strip()[-400:]}"
    cs["planner_cold_start"] = rows
    res.save()


def summarize_dynamic(pb):
    """The dynamic-shape figures the report reads, from bench/planner_bench.py's JSON: medians over every
    size of every graph of the first execution served by a stopgap (the `padded` run, or `stopgap` in older
    files: a new size in a tuned bucket) and by a cold static heuristics build (the `cold` run), and per size the promoted plan's
    execution time over the fully tuned plan's."""
    first, cold, promoted, per_graph, by_graph = [], [], [], {}, {}
    promoted_keys = []
    for g in pb.get("graphs", []):
        runs = g.get("runs", {})
        # The stopgap a new size gets first: padded where planner_bench measured it (a file from before
        # padded stopgaps has only the dynamic-shape one, as its run "stopgap").
        run = "padded" if "padded" in runs else "stopgap"
        sg = {r["shape"]: r for r in runs.get(run, {}).get("sizes", [])}
        cd = {r["shape"]: r for r in runs.get("cold", {}).get("sizes", [])}
        gf, gc = [], []
        for shape, r in sg.items():
            # New shapes only: a size that is itself a tuned representative is a hit, not a new shape.
            if r.get("first_source") in ("memory", "store"):
                continue
            if shape in cd and r.get("first_execution_ms") and cd[shape].get("first_execution_ms"):
                gf.append(r["first_execution_ms"])
                gc.append(cd[shape]["first_execution_ms"])
        first += gf
        cold += gc
        if gf:
            by_graph[g.get("graph", "?")] = {"static_build_ms": statistics.median(gc),
                                             "stopgap_first_ms": statistics.median(gf), "sizes": len(gf),
                                             "ratio": statistics.median(gc) / statistics.median(gf)}
        ratios = g.get("ratios", {})
        # The goal's figure: the plan a background tune promoted over the fully tuned one, timed in one
        # process where planner_bench measured it (promotion_bench), else in GPU time across processes
        # (older files: the build-promoted plan, host-timed).
        key = next((k for k in ("same_process_over_tuned", "tune_promoted_over_tuned_gpu")
                    if any(v.get(k) for v in ratios.values())), "promoted_over_tuned")
        promoted += [v[key] for v in ratios.values() if v.get(key)]
        promoted_keys.append(f"{g.get('graph', '?')}: {key}")
        per_graph[g.get("graph", "?")] = {k: v.get("cold_build_over_padded", v.get("cold_build_over_stopgap"))
                                          for k, v in ratios.items()}
    out = {"cold_build_over_stopgap_per_size": per_graph, "promoted_vs_tuned": promoted,
           "promoted_vs_tuned_from": "; ".join(promoted_keys) or None,
           "new_shape_by_graph": by_graph}
    if first:
        out["stopgap_first_ms"] = statistics.median(first)
        out["static_build_ms"] = statistics.median(cold)
        out["sizes"] = len(first)
    return out


def part_dynamic(a, res, work):
    if a.dynamic_from:
        with open(a.dynamic_from) as f:
            pb = json.load(f)
        res.data["dynamic"] = {"planner_bench": pb, "from_file": a.dynamic_from,
                               "note": "not re-run by this suite run: bench/planner_bench.py's results from the file named"}
        res.data["dynamic"].update(summarize_dynamic(pb))
        res.save()
        return
    out = os.path.join(work, "runtime.json")
    rc, so, se, wall = run([sys.executable, os.path.join(ROOT, "bench", "planner_bench.py"), "--kiln", a.kiln,
                            "--out", out, "--work", os.path.join(work, "planner_bench")], a.timeout * 6)
    log(f"planner_bench exit {rc} in {wall:.0f} s\n{so[-1500:]}{se[-800:]}")
    if rc == 0 and os.path.exists(out):
        with open(out) as f:
            pb = json.load(f)
        res.data["dynamic"] = {"planner_bench": pb}
        res.data["dynamic"].update(summarize_dynamic(pb))
    else:
        res.data["errors"]["planner_bench"] = f"exit {rc}: {(se or so).strip()[-500:]}"
    res.save()


def part_capture(a, res, work):
    # Both specs tuned into a store first: the benchmark launches and replays tuned plans (its JSON says
    # each plan's source).
    out = os.path.join(work, "capture.json")
    cstore = os.path.join(work, "capture_store.db")
    single = os.path.join(ROOT, "examples", "small", "conv_bias_relu.json")
    for sp in (single, os.path.join(ROOT, "bench", "capture", "chain_conv8.json")):
        rc, so, se, _ = run([a.kiln, "tune", sp, "--no-unfused", "--store", cstore], a.timeout)
        if rc != 0:
            res.data["errors"][f"tune {os.path.basename(sp)} for capture_bench"] = f"exit {rc}: {se.strip()[-300:]}"
    rc, so, se, _ = run([os.path.join(a.build, "benchmarks", "capture_bench"), "--store", cstore, "--spec", single,
                         "--out", out], a.timeout)
    log(f"capture_bench exit {rc}\n{so}{se[-800:]}")
    if rc == 0:
        with open(out) as f:
            cap = json.load(f)
        rows = cap.get("results", [])
        res.data["capture"] = {"capture_bench": cap}
        if len(rows) >= 2:
            res.data["capture"]["single_speedup"] = rows[0]["speedup"]
            res.data["capture"]["chain_speedup"] = rows[1]["speedup"]
    else:
        res.data["errors"]["capture_bench"] = f"exit {rc}: {(se or so).strip()[-500:]}"
    res.save()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True, help="the kiln binary")
    ap.add_argument("--build", help="the build folder holding benchmarks/ (default: the kiln binary's folder)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--families", default="", help="comma-separated families for the cases part ('none': skip it)")
    ap.add_argument("--cases", default="", help="comma-separated case ids")
    ap.add_argument("--block", action="store_true")
    ap.add_argument("--coldstart", action="store_true")
    ap.add_argument("--dynamic", action="store_true")
    ap.add_argument("--dynamic-from", help="take the dynamic part from this earlier planner_bench.py JSON")
    ap.add_argument("--capture", action="store_true")
    ap.add_argument("--work", help="scratch folder (specs, store); default: a new temporary folder")
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds per kiln tune / benchmark process")
    a = ap.parse_args()
    a.families = [f for f in a.families.split(",") if f]
    a.cases = [c for c in a.cases.split(",") if c]
    known = {c["family"] for c in shapes.cases()} | {"none"}
    bad = [f for f in a.families if f not in known]
    if bad:
        ap.error(f"unknown family {bad[0]!r} (known: {', '.join(sorted(known))})")
    a.kiln = os.path.abspath(a.kiln)
    if not os.access(a.kiln, os.X_OK):
        ap.error(f"--kiln {a.kiln}: not an executable")
    a.build = os.path.abspath(a.build or os.path.dirname(a.kiln))
    work = a.work or tempfile.mkdtemp(prefix="kiln-suite-")
    os.makedirs(work, exist_ok=True)
    store = os.path.join(work, "suite_store.db")
    res = Results(a.out, sys.argv)
    res.data["meta"]["work"] = work
    res.data["meta"]["method"] = ("Kiln: kiln::Timer medians (L2 flushed before each sample; the stream held by a "
                                  "spinning kernel while a sample is enqueued, hiding host launch cost), from "
                                  "`kiln tune --json` per graph in a new process (docs/measure.md)")
    rc, so, _, _ = run([a.kiln, "doctor", "--json"], 60)
    try:
        doc = json.loads(so)
        res.data["meta"]["kiln_doctor"] = doc
        fe = doc.get("cudnn_frontend_version")
        res.data["meta"].update({
            "gpu": doc.get("gpu_name"), "driver": doc.get("driver_release"),
            "cuda": f"{doc.get('cuda_runtime_version', 0) // 1000}.{doc.get('cuda_runtime_version', 0) % 1000 // 10}",
            "cudnn": doc.get("cudnn_version_string"),
            "frontend": f"{fe // 10000}.{fe % 10000 // 100}.{fe % 100}" if isinstance(fe, int) else fe,
            "git_revision": os.environ.get("KILN_GIT_REVISION") or doc.get("kiln_git_revision"),
            "date": time.strftime("%Y-%m-%d", time.gmtime())})
    except ValueError:
        res.data["meta"]["kiln_doctor"] = {"exit": rc, "raw": so[-800:]}
    res.save()
    if "none" not in a.families:
        part_cases(a, res, store, work)
    if a.block:
        part_block(a, res, store, work)
    if a.capture:
        part_capture(a, res, work)
    if a.coldstart:
        part_coldstart(a, res, store, work)
    if a.dynamic or a.dynamic_from:
        part_dynamic(a, res, work)
    res.data["meta"]["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    res.data["meta"]["wall_s"] = round(time.monotonic() - T0, 1)
    res.save()
    log(f"done: {a.out}")


if __name__ == "__main__":
    main()
