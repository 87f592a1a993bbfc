"""A transformer MLP block served by Kiln (docs/python.md "PyTorch"): the up-projection's matmul + bias + GELU runs
as one tuned, verified cuDNN plan, the down-projection's matmul + bias as another, both as torch custom ops that
torch.compile(fullgraph=True) and CUDA graphs accept.

    python python/examples/mlp_block.py --store plans.db --tune     # tune both graphs at the example's shape, then run
    python python/examples/mlp_block.py --store plans.db            # serve from the store

Prints each variant's time (CUDA events, median of --iters) and checks the outputs against PyTorch's own MLP.
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch
from torch import nn

import kiln
import kiln.torch


def mlp_spec(name: str, d_in: int, d_out: int, tokens: int, gelu: bool, dtype: str = "bf16") -> dict:
    """x[1, tokens, d_in] @ w[1, d_in, d_out] + bias (+ GELU), tokens dynamic."""
    nodes = [
        {"name": "mm", "op": "matmul", "inputs": ["x", "w"], "outputs": ["mm_out"]},
        {"name": "add_bias", "op": "bias_add", "inputs": ["mm_out", "bias"], "outputs": ["biased" if gelu else "y"]},
    ]
    if gelu:
        nodes.append({"name": "gelu", "op": "gelu_erf", "inputs": ["biased"], "outputs": ["y"]})
    return {
        "name": name, "io_dtype": dtype, "intermediate_dtype": "fp32", "compute_dtype": "fp32",
        "dynamic": {"tokens": tokens},
        "tensors": {"x": {"dims": [1, "tokens", d_in]}, "w": {"dims": [1, d_in, d_out]}, "bias": {"dims": [1, 1, d_out]}},
        "nodes": nodes, "outputs": ["y"],
    }


class TorchMLP(nn.Module):
    """The block as PyTorch writes it."""

    def __init__(self, d: int, h: int, dtype=torch.bfloat16):
        super().__init__()
        self.up = nn.Linear(d, h, dtype=dtype, device="cuda")
        self.down = nn.Linear(h, d, dtype=dtype, device="cuda")

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


class KilnMLP(nn.Module):
    """The same block (the same weights) through two Kiln ops. The weights are kept as [1, in, out] row-major, the
    layout the graphs declare (nn.Linear keeps [out, in])."""

    def __init__(self, ref: TorchMLP, store: str | None, tokens: int):
        super().__init__()
        d, h = ref.up.in_features, ref.up.out_features
        self.w_up = ref.up.weight.detach().t().contiguous().unsqueeze(0)
        self.b_up = ref.up.bias.detach().reshape(1, 1, h)
        self.w_down = ref.down.weight.detach().t().contiguous().unsqueeze(0)
        self.b_down = ref.down.bias.detach().reshape(1, 1, d)
        self.up_op = kiln.torch.op(mlp_spec(f"mlp_up_{d}x{h}", d, h, tokens, True), store=store)
        self.down_op = kiln.torch.op(mlp_spec(f"mlp_down_{h}x{d}", h, d, tokens, False), store=store)

    def forward(self, x):
        b, s, d = x.shape
        t = x.reshape(1, b * s, d)
        y = self.down_op(self.up_op(t, self.w_up, self.b_up), self.w_down, self.b_down)
        return y.reshape(b, s, d)


def time_ms(fn, x, iters: int) -> float:
    for _ in range(5):
        fn(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def kernel_profile(fn, x, iters: int) -> list:
    """The GPU kernels one call of fn(x) runs, from torch.profiler over `iters` calls after a warm-up: per kernel
    name, calls per iteration and mean device microseconds, longest first; the gaps show as the difference
    between their sum and time_ms."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(5):
        fn(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn(x)
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        dev_us = getattr(e, "device_time_total", None)
        if dev_us is None:
            dev_us = getattr(e, "cuda_time_total", 0.0)
        if dev_us <= 0 or e.count < iters:
            continue
        rows.append({"kernel": e.key[:120], "per_iter": e.count / iters, "mean_us": round(dev_us / e.count, 2),
                     "us_per_iter": round(dev_us / iters, 2)})
    return sorted(rows, key=lambda r: -r["us_per_iter"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", default=None, help="plan store (default: $KILN_STORE or ~/.cache/kiln/plans.db)")
    ap.add_argument("--tune", action="store_true", help="tune both graphs at the example's shape first")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--h", type=int, default=14336)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--profile", action="store_true",
                    help="also list each variant's GPU kernels (torch.profiler): where the time between them goes")
    a = ap.parse_args()
    store = a.store or kiln.store.default_path()
    tokens = a.batch * a.seq
    torch.manual_seed(0)
    ref = TorchMLP(a.d, a.h)
    if a.tune:
        for spec in (mlp_spec(f"mlp_up_{a.d}x{a.h}", a.d, a.h, tokens, True),
                     mlp_spec(f"mlp_down_{a.h}x{a.d}", a.h, a.d, tokens, False)):
            for r in kiln.tune(spec, store, time_budget_s=120):
                print(f"tuned {r['graph']}: {r['winner']} {r['median_ms']:.3f} ms ({r['passed']}/{r['candidates']} "
                      f"passed; stored {r['stored']})")
    model = KilnMLP(ref, store, tokens)
    x = torch.randn(a.batch, a.seq, a.d, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = ref(x).float()
        got = model(x)
        compiled_kiln = torch.compile(model, fullgraph=True)
        got_compiled = compiled_kiln(x)
        compiled_ref = torch.compile(ref)
        err = (got.float() - want).abs().max().item()
        scale = want.abs().max().item()
        exact = torch.equal(got, got_compiled)
        results = {
            "shape": {"batch": a.batch, "seq": a.seq, "d": a.d, "h": a.h},
            "max_abs_error_vs_torch": err, "torch_output_max_abs": scale,
            "compiled_matches_eager_exactly": exact,
            "ms": {
                "torch_eager": time_ms(ref, x, a.iters),
                "torch_compile": time_ms(compiled_ref, x, a.iters),
                "kiln_eager": time_ms(model, x, a.iters),
                "kiln_compile_fullgraph": time_ms(compiled_kiln, x, a.iters),
            },
            "plans": {},
        }
        t = x.reshape(1, -1, a.d)
        up = kiln.torch.plan(model.up_op, t, model.w_up, model.b_up)
        h = model.up_op(t, model.w_up, model.b_up)
        down = kiln.torch.plan(model.down_op, h, model.w_down, model.b_down)
        for name, p in (("up", up), ("down", down)):
            results["plans"][name] = {"source": p.source, "config": p.config, "why": p.why}
        if a.profile:
            results["kernels"] = {"torch_eager": kernel_profile(ref, x, 20), "kiln_eager": kernel_profile(model, x, 20)}
    ms = results["ms"]
    print(json.dumps(results, indent=2))
    print(f"kiln vs eager {ms['torch_eager'] / ms['kiln_eager']:.3f}x, vs torch.compile "
          f"{ms['torch_compile'] / ms['kiln_eager']:.3f}x; max |error| {err:.4g} (outputs up to {scale:.3g}); "
          f"compiled == eager: {exact}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    if err > 0.05 * max(scale, 1.0) or not exact:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
