#!/usr/bin/env python3
"""Issue 11's tuning benchmark: what `kiln tune` and `kiln run --verify` cost in wall time, per graph.

For each spec (default: bench/specs/*.json, the issue's four graphs) it runs, each in a new process:
  kiln tune SPEC --json --store STORE      (every candidate, the gate, the unfused alternative)
  kiln run SPEC --verify --store STORE     (the stored winner, verified against the device reference)
and writes a JSON list, one entry per graph:
  graph        op and shape, e.g. "matmul_bias_gelu 8192x8192x8192"
  candidates   how many the tuner considered (after filters)
  wall_s       `kiln tune` wall time, process start to exit
  phases       per candidate: build_ms (on a worker thread, overlapped), gate_ms (one run + the device
               comparison), warmup_ms, timing_ms, and its disposition; plus the run's prepare (inputs and
               reference) and build wall times, and the largest and median gate cost
  rejected     candidates that were not Passed, with why (Incorrect, Failed, NotSupported)
  run_verify_wall_s, run_verify_exit, run_verify_reference
and prints a Markdown table for docs/h200-results.md.

  python3 bench/tune_bench.py --kiln build/kiln --out bench/results/h200/tuning.json [SPEC...]

No dependency beyond the standard library. Exit 0 when every command ran (whatever it measured).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

LABELS = {
    "matmul_bias_gelu_8192": "matmul_bias_gelu 8192x8192x8192",
    "layer_norm_65536x1024": "layer_norm 65536x1024",
    "conv_bias_relu_1x1_256to64_n32": "conv_bias_relu 1x1 256->64 n32",
    "conv_bias_relu_3x3_64to64_n32": "conv_bias_relu 3x3 64->64 n32",
}


def run(cmd, timeout):
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return 124, out, err, time.monotonic() - t0


def entry_for(spec, kiln, store, timeout, tune_args=(), verify_run=True):
    name = os.path.splitext(os.path.basename(spec))[0]
    e = {"graph": LABELS.get(name, name), "spec": spec, "tune_args": list(tune_args)}
    rc, out, err, wall = run([kiln, "tune", spec, "--json", "--store", store, *tune_args], timeout)
    e["wall_s"] = round(wall, 3)
    e["tune_exit"] = rc
    e["tune_stderr_tail"] = err[-2000:]
    reports = []
    try:
        reports = json.loads(out)
    except ValueError:
        e["tune_json_error"] = out[-2000:]
    fused = reports[0] if reports else None
    if fused:
        meta = fused.get("meta", {})
        cands = fused.get("candidates", [])
        e["candidates"] = len(cands)
        e["reference"] = meta.get("reference")
        e["tune_total_wall_ms"] = meta.get("total_wall_ms")
        e["prepare_wall_ms"] = meta.get("prepare_wall_ms")
        e["build_wall_ms"] = meta.get("build_wall_ms")
        e["candidate_budget"] = meta.get("candidate_budget")
        e["winner"] = fused.get("winner")
        e["best_ms"] = (fused.get("summary") or {}).get("best_ms")
        phases = []
        for c in cands:
            ph = c.get("phases_ms", {})
            phases.append({"identity": c.get("identity"), "disposition": c.get("disposition"),
                           "build_ms": ph.get("build"), "gate_ms": ph.get("gate"),
                           "warmup_ms": ph.get("warmup"), "timing_ms": ph.get("timing"),
                           "median_ms": c.get("median_ms"), "heuristic_rank": c.get("heuristic_rank"),
                           "message": c.get("message")})
        e["phases"] = phases
        gates = [p["gate_ms"] for p in phases if p["gate_ms"]]
        if gates:
            e["gate_ms_max"] = max(gates)
            e["gate_ms_median"] = statistics.median(gates)
        e["rejected"] = [{"identity": c.get("identity"), "disposition": c.get("disposition"), "message": c.get("message")}
                         for c in cands if c.get("disposition") != "Passed"]
        if "fusion" in fused:
            f = fused["fusion"]
            e["unfused"] = {"decision": f.get("decision"), "available": f.get("unfused_available"),
                            "reason": f.get("unfused_unavailable_reason"),
                            "chain_ms": (f.get("unfused") or {}).get("median_ms")}
    if not verify_run:
        e["run_verify_wall_s"], e["run_verify_exit"] = 0.0, None
        return e
    rc, out, err, wall = run([kiln, "run", spec, "--verify", "--store", store], timeout)
    e["run_verify_wall_s"] = round(wall, 3)
    e["run_verify_exit"] = rc
    e["run_verify_output_tail"] = (out + err)[-1500:]
    return e


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True, help="path of the kiln binary")
    ap.add_argument("--out", required=True, help="JSON file to write (its folder is made)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per command (default 300)")
    ap.add_argument("--tune-arg", action="append", default=[],
                    help="an argument added to each `kiln tune` (repeat: --tune-arg=--exhaustive)")
    ap.add_argument("--no-verify-run", action="store_true", help="skip `kiln run --verify` after each tune")
    ap.add_argument("specs", nargs="*", help="spec files (default: bench/specs/*.json)")
    a = ap.parse_args()
    if not os.access(a.kiln, os.X_OK):
        print(f"no kiln binary at {a.kiln}", file=sys.stderr)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    specs = a.specs or sorted(glob.glob(os.path.join(here, "specs", "*.json")))
    results = []
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)

    def save():  # after every graph, so that a run stopped from outside keeps what it measured
        tmp_out = a.out + ".tmp"
        with open(tmp_out, "w") as f:
            json.dump(results, f, indent=2)
        os.replace(tmp_out, a.out)

    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "plans.db")
        for spec in specs:
            print(f"== {spec}", file=sys.stderr, flush=True)
            results.append(entry_for(spec, a.kiln, store, a.timeout, a.tune_arg, not a.no_verify_run))
            e = results[-1]
            print(f"   {e['graph']}: tune {e['wall_s']:.1f} s (exit {e['tune_exit']}), "
                  f"run --verify {e['run_verify_wall_s']:.2f} s (exit {e['run_verify_exit']}); winner {e.get('winner')} "
                  f"{e.get('best_ms')} ms", file=sys.stderr, flush=True)
            save()
    print("| graph | candidates | `kiln tune` wall | prepare (inputs + reference) | gate per candidate (max / median) | `kiln run --verify` wall | rejected |")
    print("|---|---|---|---|---|---|---|")
    for e in results:
        rej = ", ".join(f"{r['identity']} {r['disposition']}" for r in e.get("rejected", [])) or "none"
        print(f"| {e['graph']} | {e.get('candidates', '-')} | {e['wall_s']:.1f} s (exit {e['tune_exit']}) | "
              f"{(e.get('prepare_wall_ms') or 0) / 1000:.2f} s | {e.get('gate_ms_max', 0):.2f} / {e.get('gate_ms_median', 0):.2f} ms | "
              f"{e['run_verify_wall_s']:.2f} s (exit {e['run_verify_exit']}) | {rej} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
