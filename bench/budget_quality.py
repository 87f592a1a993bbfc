#!/usr/bin/env python3
"""The candidate budget's winners against exhaustive tunes (issue 37; docs/measure.md "The candidate budget").

    python3 bench/budget_quality.py EXHAUSTIVE.json BUDGETED.json [--json OUT]

Both files are bench/tune_bench.py's output for the same specs (`--tune-arg=--exhaustive` for the first). Per graph:
the two tunes' wall times, and the budgeted winner's quality: its median in the *exhaustive* run over the exhaustive
winner's (the same run, so no run-to-run noise enters), 1.0 when it is the same configuration. Exit 1 when a graph
is missing from either run or its budgeted winner was not timed by the exhaustive run.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("exhaustive")
    ap.add_argument("budgeted")
    ap.add_argument("--json")
    a = ap.parse_args()
    ex = {e["graph"]: e for e in json.load(open(a.exhaustive))}
    bu = {e["graph"]: e for e in json.load(open(a.budgeted))}
    rows, bad = [], 0
    for graph, e in ex.items():
        b = bu.get(graph)
        if b is None or not e.get("phases") or not b.get("winner"):
            print(f"{graph}: missing from the budgeted run or without a winner", file=sys.stderr)
            bad += 1
            continue
        times = {p["identity"]: p["median_ms"] for p in e["phases"] if p.get("median_ms")}
        best = min(times.values())
        mine = times.get(b["winner"])
        if mine is None:
            print(f"{graph}: the budgeted winner {b['winner']} was not timed by the exhaustive run", file=sys.stderr)
            bad += 1
            continue
        compiled = sum(1 for p in b["phases"] if not (p.get("message") or "").startswith("not run: candidate budget"))
        rows.append({"graph": graph, "exhaustive_wall_s": e["wall_s"], "budgeted_wall_s": b["wall_s"],
                     "candidates": len(e["phases"]), "budgeted_compiled": compiled,
                     "exhaustive_winner": e["winner"], "budgeted_winner": b["winner"],
                     "winner_over_best": mine / best})
    print("| graph | candidates | exhaustive wall | budgeted wall (compiled) | budgeted winner vs exhaustive best |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['graph']} | {r['candidates']} | {r['exhaustive_wall_s']:.1f} s | {r['budgeted_wall_s']:.1f} s "
              f"({r['budgeted_compiled']}) | {r['winner_over_best']:.3f}x |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
