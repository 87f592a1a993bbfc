"""Where a Kiln call from Python spends its time: one contestant of overhead.py called in a loop for a few seconds, for
a sampling profiler to watch (scripts/prebuilt-gpu.sh's phase pyprofile runs it under py-spy with native frames).

    python bench/python/profile_call.py --what op|dispatcher|plan|cpp [--seconds 6]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln  # noqa: E402
import kiln.torch  # noqa: E402
from overhead import spec  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--what", choices=["op", "dispatcher", "plan", "cpp"], required=True)
    ap.add_argument("--seconds", type=float, default=6.0)
    a = ap.parse_args()
    tokens, d, h = 16, 128, 256
    x = torch.randn(1, tokens, d, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1, d, h, device="cuda", dtype=torch.bfloat16) / d**0.5
    bias = torch.randn(1, 1, h, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(1, tokens, h, device="cuda", dtype=torch.bfloat16)
    s = spec(tokens, d, h)
    planner = kiln.Planner()
    prepared = planner.prepare(s)
    plan = planner.obtain(prepared, {"tokens": tokens})
    op = kiln.torch.op(s, planner=planner)
    calls = {
        "op": lambda: op(x, w, bias),
        "dispatcher": lambda: op.op(x, w, bias),
        "plan": lambda: plan(x=x, w=w, bias=bias, y=y),
        "cpp": lambda: kiln._kiln._time_cpp_calls(prepared, {"tokens": tokens}, None, 1000, x=x, w=w, bias=bias, y=y),
    }
    call = calls[a.what]
    n, end = 0, time.perf_counter() + a.seconds
    while time.perf_counter() < end:
        for _ in range(100):
            call()
        torch.cuda.synchronize()
        n += 100
    print(f"{a.what}: {n} loops in {a.seconds} s (plan {plan.source} {plan.config})")


if __name__ == "__main__":
    main()
