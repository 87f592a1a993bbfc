#!/usr/bin/env python3
"""Issue 12's runtime benchmark: what kiln::Planner costs per source for new shapes of a structure.

For each graph (conv+bias+ReLU over 8 batch sizes, matmul+bias+GELU over 8 token counts):
  1. tune the bucket representatives (pow2) into a store:  kiln tune SPEC --shapes REC --buckets P --store S
  2. replay a trace that asks for every size once, then 20 more times, through the Planner
     (kiln replay TRACE --store S --buckets P --json): sizes that are representatives come from the store,
     the others from their bucket's tuned configuration; per source: time to first execution, execution time
  3. the same trace with no store: every size from cuDNN's heuristics (a cold static build per size)
  4. every size tuned exactly into a second store and replayed: the execution time of a fully tuned plan
and writes one JSON object (bench/results/h200/runtime.json by default) with, per graph and size, the
source, first-execution ms and execution ms of each run, and the ratios the issue names:
  cold_build_over_bucket   heuristics first-execution / bucket first-execution (goal >= 50)
  bucket_over_tuned        bucket execute / fully tuned execute (goal <= 1.03 after promotion)

  python3 bench/planner_bench.py --kiln build/kiln [--out FILE] [--work DIR]

Standard library only. Needs a GPU. Exit 0 when every command ran.
"""
import argparse
import json
import os
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


def replay(kiln, trace, store, policy, work, tag):
    cmd = [kiln, "replay", trace, "--json", "--buckets", policy]
    if store:
        cmd += ["--store", store]
    p = sh(cmd)
    if p.returncode != 0:
        return None
    with open(os.path.join(work, f"replay-{tag}.json"), "w") as f:
        f.write(p.stdout)
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "h200", "runtime.json"))
    ap.add_argument("--work", default=None, help="folder for specs, stores and traces (default: a temporary one)")
    a = ap.parse_args()
    if not os.access(a.kiln, os.X_OK):
        print(f"no kiln binary at {a.kiln}", file=sys.stderr)
        return 2
    work = a.work or tempfile.mkdtemp(prefix="kiln_planner_bench_")
    os.makedirs(work, exist_ok=True)
    results = {"method": "kiln replay through kiln::Planner, one process per run; first execution = obtain + "
                         "execute + stream sync of a size's first request; execute = median of its later requests",
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
        per_size = {}
        for tag, st in (("buckets", store), ("heuristics", None), ("tuned", exact)):
            rows = []
            for s in sizes:  # one process per size, so that each first execution is a cold one for its key
                t = {"format": "kiln-trace", "version": 1,
                     "requests": [{"spec": spec, "shape": {sym: s}}, {"spec": spec, "shape": {sym: s}, "count": 20}]}
                tp = os.path.join(work, f"{name}-{tag}-{s}.trace.json")
                with open(tp, "w") as f:
                    json.dump(t, f)
                r = replay(a.kiln, tp, st, policy, work, f"{name}-{tag}-{s}")
                if r is None:
                    rows.append({"size": s, "error": True})
                    continue
                src = [k for k, v in r["by_source"].items() if k != "memory" and v["calls"] > 0]
                first = r["by_source"][src[0]]["first_execution_ms_p50"] if src else None
                rows.append({"size": s, "source": src[0] if src else "memory", "first_execution_ms": first,
                             "execute_ms": r["by_source"]["memory"]["execute_ms_p50"]})
            entry["runs"][tag] = rows
        for i, s in enumerate(sizes):
            b, h, t = (entry["runs"][k][i] for k in ("buckets", "heuristics", "tuned"))
            ok = all(not x.get("error") for x in (b, h, t))
            per_size[s] = {
                "source_with_store": b.get("source"),
                "cold_build_over_bucket": (h["first_execution_ms"] / b["first_execution_ms"]) if ok and b["first_execution_ms"] else None,
                "bucket_over_tuned": (b["execute_ms"] / t["execute_ms"]) if ok and t["execute_ms"] else None,
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
