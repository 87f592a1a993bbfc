#!/usr/bin/env python3
"""The main job's report (scripts/run.sh on a GPU machine), one line per example graph.

  python3 scripts/main_report.py DIR NAME...

DIR holds, per example NAME (written by scripts/run.sh):
  tune-NAME.json   `kiln tune SPEC --use-store --json` (every candidate timed: kiln::Timer medians, L2 cold)
  tune-NAME.rc     its exit code
  load-NAME.txt    `kiln run SPEC --use-store --verify` in a new process: the stored plan loaded and checked
  load-NAME.rc
  build-NAME.txt   `kiln run SPEC` in a new process, no store: a plan built from cuDNN's heuristics
  build-NAME.rc
Columns: heuristic ms (cuDNN's first choice, timed by the tuner), tuned ms (the winner), gain (heuristic /
tuned), fusion (the fused winner against the unfused chain, when the graph has more than one node: which
was faster, and the unfused time; Kiln runs the fused plan either way), load ms and build ms (time to obtain the plan in a new process: from the
store, and built from heuristics; both include cuDNN's first-use work in that process), source (where
`kiln run` got its plan), verify (the stored plan's outputs against the reference).
Exit 0 when every example was tuned, loaded from the store and verified; 1 otherwise.
"""
import json
import os
import re
import sys

RUN_LINE = re.compile(r"^(?P<graph>\S+): plan (?P<plan>.+?) from (?P<source>\S+) \(workspace \d+ B, "
                      r"(?P<obtain>[0-9.]+) ms to obtain\), ran in (?P<ran>[0-9.]+) ms", re.M)


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def fmt(x, digits=3):
    return "-" if x is None else f"{x:.{digits}g}" if x < 100 else f"{x:.0f}"


def tune_figures(d, name):
    rc = read(os.path.join(d, f"tune-{name}.rc"), "?").strip()
    try:
        reports = json.loads(read(os.path.join(d, f"tune-{name}.json")))
    except ValueError:
        return {"error": f"kiln tune exit {rc}, no report"}
    if isinstance(reports, dict):
        reports = [reports]
    fig = {"heuristic": 0.0, "tuned": 0.0, "unfused": None, "choice": None}
    for r in reports:  # a graph run as several fused segments has one report per segment: times add up
        s = r.get("summary", {})
        if s.get("best_ms") is None:
            return {"error": f"no correct plan: {s.get('error', '?')}"}
        fig["tuned"] += s["best_ms"]
        fig["heuristic"] = None if fig["heuristic"] is None or s.get("heuristic_ms") is None else fig["heuristic"] + s["heuristic_ms"]
        fu = r.get("fusion")
        if fu:
            fig["choice"] = fu.get("decision") or "fused"
            u = (fu.get("unfused") or {}).get("median_ms")
            fig["unfused"] = u if u is not None else fig["unfused"]
            if not fu.get("unfused_available"):
                fig["choice"] = "fused (no unfused chain)"
    if rc != "0":
        fig["error"] = f"kiln tune exit {rc}"
    return fig


def run_figures(d, kind, name):
    text = read(os.path.join(d, f"{kind}-{name}.txt"))
    rc = read(os.path.join(d, f"{kind}-{name}.rc"), "?").strip()
    m = RUN_LINE.search(text)
    fig = {"rc": rc, "obtain": float(m["obtain"]) if m else None, "source": m["source"] if m else None}
    if fig["source"] == "segments":  # a graph cuDNN cannot fuse whole: its segments' sources, one line each
        srcs = re.findall(r"^  segment \S+: \S+ from (\S+)$", text, re.M)
        if srcs and all(s == srcs[0] for s in srcs):
            fig["source"] = f"{srcs[0]} ({len(srcs)} segments)"
    if kind == "load":
        fig["verify"] = "passed" if rc == "0" else ("failed" if rc == "5" else f"exit {rc}")
        last = [l for l in text.strip().splitlines() if l.startswith("kiln: ")]
        if last:
            fig["why"] = last[-1][len("kiln: "):][:160]
    return fig


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    d, names = sys.argv[1], sys.argv[2:]
    rows, ok = [], True
    for n in names:
        t, l, b = tune_figures(d, n), run_figures(d, "load", n), run_figures(d, "build", n)
        gain = t["heuristic"] / t["tuned"] if t.get("heuristic") and t.get("tuned") else None
        if t.get("choice") is None:
            fusion = "single op" if "error" not in t else "-"
        else:
            # Kiln runs the fused plan either way; the column says which side was faster.
            fusion = (f"{t['choice']} faster (unfused {fmt(t['unfused'])} ms)" if t.get("unfused") else t["choice"])
        rows.append([n, fmt(t.get("heuristic")), fmt(t.get("tuned")), f"{gain:.2f}x" if gain else "-", fusion,
                     fmt(l["obtain"], 3), fmt(b["obtain"], 3), l["source"] or "-", l["verify"]])
        if "error" in t or l["verify"] != "passed" or not (l["source"] or "").startswith("store"):
            ok = False
            why = t.get("error") or l.get("why") or (f"served from {l['source']}, not the store" if l["source"] else "")
            rows[-1].append(why)
    head = ["graph", "heuristic ms", "tuned ms", "gain", "fusion", "load ms", "build ms", "source", "verify"]
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    print("[report] per graph: the tuner's times (GPU, L2 cold); then a new process loads the stored plan")
    print("[report] (load ms, verified against the reference) and another builds one from heuristics (build ms)")
    print("  " + "  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in rows:
        line = "  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths))
        print(line + (f"  <- {r[-1]}" if len(r) > len(head) and r[-1] else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
