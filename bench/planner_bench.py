#!/usr/bin/env python3
"""Issue 12's runtime benchmark: what kiln::Planner costs per source for new shapes of a structure.

For each graph (conv+bias+ReLU over 8 batch sizes, matmul+bias+GELU over 8 token counts):
  1. tune the bucket representatives (pow2) into a store:  kiln tune SPEC --shapes REC --buckets P --store S
  2. tune every size exactly into a second store (the fully tuned plans)
  3. replay, in ONE process per run (a service that is up), a trace that first warms the process with one
     request of a size outside the list (--warm-requests N: N of them), then asks for every size once, waits for the Planner's background promotions,
     then asks for every size 50 more times:
       padded     store of step 1, --new-shapes stopgap --preload --warm (the service loads its store at
                  start and runs each plan once, timed apart): a new size runs at once on tuned plans, no
                  build: split (the tuned plans of smaller sizes that sum to it, each on its own rows) where
                  the size is such a sum, else padded on its bucket representative's plan
                  (kiln/runtime/padding.h); then it is promoted to its bucket's tuned configuration built for it
       padded-only  the same with --no-split: every new size padded
       dynamic    the same with --no-padded: a new size is served by a dynamic-shape build that shares the
                  structure's kernel cache, then promoted the same way
       build-now  store of step 1, --new-shapes build-now: a new size waits for its bucket's configuration
       cold       no store, --new-shapes build-now: every size a static build from cuDNN's heuristics
       tuned      store of step 2: every size from the store
       padded-held, dynamic-held   as padded and dynamic, with --no-promote: the stopgaps' own execution
       padded-tuned   as padded, with --promote-by tune: each new size's promotion is that size tuned in the
                  background (kiln tune's candidates, gate and winner rule: every candidate, 10 s each at most)
and writes one JSON object (bench/results/h200/runtime.json by default): per graph and size, the source of
its first request, its time to first execution (obtain + execute + stream sync), and the execution time
(median over its later requests, host-timed execute + sync) of the stopgap and of the static plan, with
  cold_build_over_padded    cold first-execution / padded first-execution    (goal >= 50)
                  The padded, padded-only and cold runs are repeated (--repeats, 3 by default), alternating,
                  and their ratios are of the medians over the repeats.
  cold_build_over_padded_only   the same for padded-only
  cold_build_over_dynamic   cold first-execution / dynamic first-execution
  promoted_over_tuned       promoted plan's execute / fully tuned execute (host-timed execute + sync)
  promoted_over_tuned_gpu   the same in GPU time (CUDA events around each execute, host launch left out)
  tune_promoted_over_tuned_gpu   padded-tuned's promoted plan / fully tuned, GPU time (across processes)
  same_process_over_tuned   benchmarks/promotion_bench (beside the kiln binary): in ONE process, the plan
                  a --promote-by tune Planner promoted for the size and the size's fully tuned plan (store of
                  step 2), alternating on shared buffers, 200 CUDA-event-timed runs each, median / median
                  (goal <= 1.03; the same configuration measured up to 7% apart across processes)
  same_process_build_over_tuned   the same for --promote-by build (the bucket's configuration)
  padded_over_tuned, dynamic_over_tuned   the stopgap's execute / fully tuned execute (what promotion buys)

  python3 bench/planner_bench.py --kiln build/kiln [--out FILE] [--work DIR]

Standard library only. Needs a GPU. Exit 0 when every command ran.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MLP = {
    "name": "mlp_tokens", "io_dtype": "bf16", "dynamic": {"tokens": 1024},
    "tensors": {"x": {"dims": [1, "tokens", 4096]}, "w": {"dims": [1, 4096, 4096]}, "b": {"dims": [1, 1, 4096]}},
    "nodes": [{"name": "mm", "op": "matmul", "inputs": ["x", "w"], "outputs": ["h"]},
              {"name": "bias", "op": "bias_add", "inputs": ["h", "b"], "outputs": ["hb"]},
              {"name": "gelu", "op": "gelu_tanh", "inputs": ["hb"], "outputs": ["y"]}],
    "outputs": ["y"]}

GRAPHS = [
    # (name, spec (a path or a dict), symbol, sizes)
    ("conv_bias_relu", os.path.join(ROOT, "examples", "conv_bias_relu.json"), "batch", [3, 6, 12, 20, 24, 40, 48, 64]),
    ("matmul_bias_gelu", MLP, "tokens", [100, 200, 300, 500, 700, 1000, 1500, 2000]),
]
POLICY_RULE = "pow2"


def sh(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        print(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}", file=sys.stderr)
    return p


def signature(kiln, spec):
    p = sh([kiln, "signature", spec, "--json"])
    return json.loads(p.stdout)["structure"] if p.returncode == 0 else None


def replay(kiln, trace, store, policy, new_shapes, work, tag, extra=()):
    cmd = [kiln, "replay", trace, "--json", "--buckets", policy, "--new-shapes", new_shapes, *extra]
    if store:
        cmd += ["--store", store]
    p = sh(cmd)
    if p.returncode != 0:
        return None
    with open(os.path.join(work, f"replay-{tag}.json"), "w") as f:
        f.write(p.stdout)
    return json.loads(p.stdout)


def promotion_bench(kiln, spec, sym, sizes, policy, store, exact, promote_by, work, tag):
    exe = os.path.join(os.path.dirname(os.path.abspath(kiln)), "benchmarks", "promotion_bench")
    if not os.access(exe, os.X_OK):
        print(f"no promotion_bench at {exe}: same-process ratios not measured", file=sys.stderr)
        return None
    p = sh([exe, "--spec", spec, "--symbol", sym, "--sizes", ",".join(str(s) for s in sizes), "--buckets", policy,
            "--reps", store, "--exact", exact, "--promote-by", promote_by, "--json"], timeout=600)
    if p.returncode != 0:
        return None
    with open(os.path.join(work, f"promotion-{tag}.json"), "w") as f:
        f.write(p.stdout)
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "h200", "runtime.json"))
    ap.add_argument("--work", default=None, help="folder for specs, stores and traces (default: a temporary one)")
    ap.add_argument("--warm-requests", type=int, default=1,
                    help="requests of the warm-up size before the measured sizes (20 measured no faster first "
                         "executions than 1 on the H200, 2026-12-03)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="processes per size for the padded, padded-only and cold runs (ratios of medians)")
    a = ap.parse_args()
    if a.repeats < 1 or a.warm_requests < 1:
        ap.error("--repeats and --warm-requests must be at least 1")
    if not os.access(a.kiln, os.X_OK):
        print(f"no kiln binary at {a.kiln}", file=sys.stderr)
        return 2
    work = a.work or tempfile.mkdtemp(prefix="kiln_planner_bench_")
    os.makedirs(work, exist_ok=True)
    results = {"method": f"kiln replay through kiln::Planner, one process per run, warmed by {a.warm_requests} "
                         "requests of one size outside the list; first execution = obtain + execute + stream sync of a size's first request "
                         "(host clock; the replay's own buffers for a new plan are made between the two, untimed); execute = median of host-timed execute + sync over its later requests, "
                         "after the background promotions finished; the padded, padded-only and cold runs are "
                         "repeated, alternating, and cold_build_over_padded(_only) are ratios of the medians of "
                         "first_execution_ms over the repeats (first_execution_ms_repeats)",
               "graphs": []}
    for name, spec, sym, sizes in GRAPHS:
        if isinstance(spec, dict):
            path = os.path.join(work, f"{name}.json")
            with open(path, "w") as f:
                json.dump(spec, f)
            spec = path
        policy = f"{sym}={POLICY_RULE}"
        structure = signature(a.kiln, spec)
        entry = {"graph": name, "symbol": sym, "sizes": sizes, "policy": policy, "runs": {}}
        # 1. Tune the representatives (the recorder file format, written here by hand).
        rec = {"format": "kiln-shapes", "version": 1,
               "shapes": [{"structure": structure, "shape_key": f"{sym}={s}", "graph": name, "count": 1} for s in sizes]}
        rec_path = os.path.join(work, f"{name}-shapes.json")
        with open(rec_path, "w") as f:
            json.dump(rec, f)
        store = os.path.join(work, f"{name}-buckets.db")
        sh([a.kiln, "tune", spec, "--shapes", rec_path, "--buckets", policy, "--store", store, "--no-unfused"], timeout=600)
        # 4's store: every size tuned exactly.
        exact = os.path.join(work, f"{name}-exact.db")
        sh([a.kiln, "tune", spec, "--shapes", rec_path, "--store", exact, "--no-unfused"], timeout=900)
        warm = {"conv_bias_relu": 2, "matmul_bias_gelu": 64}[name]
        reqs = [{"spec": spec, "shape": {sym: warm}, "count": max(1, a.warm_requests)}]
        reqs += [{"spec": spec, "shape": {sym: s}} for s in sizes]
        reqs += [{"wait": "promotions"}]
        reqs += [{"spec": spec, "shape": {sym: s}, "count": 50} for s in sizes]
        tp = os.path.join(work, f"{name}.trace.json")
        with open(tp, "w") as f:
            json.dump({"format": "kiln-trace", "version": 1, "requests": reqs}, f)
        runs = (("padded", store, "stopgap", ("--preload", "--warm")),
                ("padded-only", store, "stopgap", ("--preload", "--warm", "--no-split")),
                ("dynamic", store, "stopgap", ("--no-padded", "--no-split")),
                ("build-now", store, "build-now", ()), ("cold", None, "build-now", ()),
                ("tuned", exact, "build-now", ()), ("padded-held", store, "stopgap", ("--preload", "--warm", "--no-promote")),
                ("dynamic-held", store, "stopgap", ("--no-padded", "--no-split", "--no-promote")),
                ("padded-tuned", store, "stopgap", ("--preload", "--warm", "--promote-by", "tune")))
        repeated = ("padded", "padded-only", "cold")
        firsts = {tag: {s: [] for s in sizes} for tag in repeated}  # first_execution_ms per repeat
        for k in range(max(1, a.repeats)):  # alternating: every repeated run once, then again
            for tag, st, mode, extra in runs:
                if k > 0 and tag not in repeated:
                    continue
                r = replay(a.kiln, tp, st, policy, mode, work, f"{name}-{tag}" + (f"-{k}" if k else ""), extra)
                rows = {}
                for row in (r or {}).get("by_shape", []):
                    rows[row["shape"]] = row
                if tag in repeated:
                    for s in sizes:
                        ms = rows.get(f"{sym}={s}", {}).get("first_execution_ms")
                        if ms:
                            firsts[tag][s].append(ms)
                if k == 0:
                    entry["runs"][tag] = {"promotions": (r or {}).get("promotions"), "stats": (r or {}).get("stats"),
                                          "preload": (r or {}).get("preload"), "failed": r is None,
                                          "sizes": [rows.get(f"{sym}={s}", {"shape": f"{sym}={s}", "error": True})
                                                    for s in sizes]}
        entry["first_execution_ms_repeats"] = {tag: {str(s): v for s, v in per.items()} for tag, per in firsts.items()}
        same = {}
        for by in ("tune", "build"):
            pbr = promotion_bench(a.kiln, spec, sym, sizes, policy, store, exact, by, work, f"{name}-{by}")
            entry[f"promotion_bench_{by}"] = pbr
            same[by] = {r["shape"]: r for r in (pbr or {}).get("sizes", [])}
        per_size = {}
        for i, s in enumerate(sizes):
            pd, po, dy, bn, cold, tuned, pheld, dheld, ptuned = (entry["runs"][k]["sizes"][i] for k, *_ in runs)
            def ratio(a_, b_):
                return a_ / b_ if a_ and b_ else None
            def med(tag):
                v = firsts[tag][s]
                return statistics.median(v) if v else None
            per_size[s] = {
                "first_source": pd.get("first_source"),
                "first_plan": pd.get("first_plan"),
                "cold_build_over_padded": ratio(med("cold"), med("padded")),
                "cold_build_over_padded_only": ratio(med("cold"), med("padded-only")),
                "cold_build_over_dynamic": ratio(cold.get("first_execution_ms"), dy.get("first_execution_ms")),
                "cold_build_over_build_now": ratio(cold.get("first_execution_ms"), bn.get("first_execution_ms")),
                "promoted_over_tuned": ratio(pd.get("execute_ms_p50"), tuned.get("execute_ms_p50")),
                "promoted_over_tuned_gpu": ratio(pd.get("gpu_ms_p50"), tuned.get("gpu_ms_p50")),
                "tune_promoted_over_tuned": ratio(ptuned.get("execute_ms_p50"), tuned.get("execute_ms_p50")),
                "tune_promoted_over_tuned_gpu": ratio(ptuned.get("gpu_ms_p50"), tuned.get("gpu_ms_p50")),
                "same_process_over_tuned": same["tune"].get(f"{sym}={s}", {}).get("ratio"),
                "same_process_build_over_tuned": same["build"].get(f"{sym}={s}", {}).get("ratio"),
                "configs": {"tuned": tuned.get("config"), "promoted": pd.get("config"),
                            "tune_promoted": ptuned.get("config")},
                "padded_over_tuned": ratio(pheld.get("stopgap_execute_ms_p50"), tuned.get("execute_ms_p50")),
                "dynamic_over_tuned": ratio(dheld.get("stopgap_execute_ms_p50"), tuned.get("execute_ms_p50")),
            }
        entry["ratios"] = per_size
        results["graphs"].append(entry)
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:  # after every graph: a run stopped from outside keeps what it measured
            json.dump(results, f, indent=2)
    print(json.dumps({g["graph"]: g["ratios"] for g in results["graphs"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
