#!/usr/bin/env python3
"""Regenerate BENCHMARKS.md (and bench/results/h200/{suite,summary}.json and the charts) from the committed
part files, in one command from the repository root:

    python3 bench/make_benchmarks_md.py

It runs bench/report.py over every part file in --parts-dir (default bench/results/h200/parts), in the
order below (a later part overrides an earlier one per key), then any other *.json there, sorted by name.
After a new run on the H200, copy its part files (OUT_DIR/<part>-kiln.json, OUT_DIR/<part>-torch.json) into
that folder and run this again. The charts need matplotlib; without it the report is written without them.

Options: --parts-dir DIR, --out-dir DIR (default bench/results/h200), --markdown FILE (default BENCHMARKS.md).
Paths are taken relative to the repository root, so it may be run from anywhere. Exit status as report.py's:
0, or 2 when a part cannot be read (naming it) or the parts folder holds none.
"""
import argparse
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import report  # noqa: E402

# The suite's parts in the order run_suite.sh writes them, then the re-measured subsets and the written
# explanations of missed goals (bench/results/h200/README.md).
ORDER = ["conv-kiln", "conv-torch", "gemm-kiln", "gemm-torch", "attention-kiln", "attention-torch",
         "band-kiln", "band-torch", "block-kiln", "block-torch", "runtime-kiln", "runtime-torch", "coldstart-kiln", "cases-kiln",
         "cases-torch", "cases-norms-kiln", "cases-norms-torch", "why"]
# (Parts a later run replaced whole are kept in a folder below, e.g. parts/superseded-2026-12-01/: not read.)


def part_files(parts_dir):
    found = {os.path.basename(p)[:-5]: p for p in glob.glob(os.path.join(parts_dir, "*.json"))}
    ordered = [found.pop(n) for n in ORDER if n in found]
    return ordered + [found[n] for n in sorted(found)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts-dir", default="bench/results/h200/parts")
    ap.add_argument("--out-dir", default="bench/results/h200")
    ap.add_argument("--markdown", default="BENCHMARKS.md")
    a = ap.parse_args(argv)
    os.chdir(ROOT)
    parts = part_files(a.parts_dir)
    if not parts:
        print(f"error: no part files (*.json) in {a.parts_dir}", file=sys.stderr)
        return 2
    # Repository-relative names, so that nothing written depends on where the checkout lies.
    parts = [os.path.relpath(p, ROOT) for p in parts]
    return report.main(parts + ["--out-dir", a.out_dir, "--markdown", a.markdown])


if __name__ == "__main__":
    sys.exit(main())
