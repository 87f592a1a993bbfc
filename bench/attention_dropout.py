#!/usr/bin/env python3
"""Attention with dropout in training (issue 36): Kiln's tuned sdpa and sdpa_backward plans with "dropout": P against
PyTorch's SDPA backends with dropout_p=P, bf16, causal, Llama-3.1-8B heads (32 query heads over 8 key heads, head dim
128; KILN_ATTN_HEADS as in attention_common), in one process on one GPU.

  python3 bench/attention_dropout.py --kiln build/kiln --out OUT [--seqs 2048,4096,8192] [--tokens 16384] [--p 0.1]

For each sequence length S (batch = tokens / S): Kiln tunes the forward graph (o and the statistics, dropout's seed and
offset int64 graph inputs) and the backward graph (the same probability, seed and offset: cuDNN draws the forward's
mask again) into OUT/dropout.db (`kiln tune`: every engine configuration measured, each checked through the dropout
probe, docs/spec.md "dropout"), and serves them (kiln.Planner from the store). The same plans without dropout are
tuned and timed too, so the row says what dropout costs Kiln. Each contestant is timed alone with
bench/suite/torch_peers.time_gpu (median GPU time over CUDA events, cold L2 before each sample): Kiln's forward, its
backward, and both in turn (a training step's attention); PyTorch's F.scaled_dot_product_attention(dropout_p=P,
is_causal=True, enable_gqa=True) forward under each SDPA backend that runs (cuDNN, flash, efficient), and its forward
plus torch.autograd.grad. TFLOP/s counts the forward as 4 B H S^2 D and the backward as 2.5 times that, halved for
causal. Writes OUT/attention_dropout.json and prints a line per measurement as it goes.
"""
from __future__ import annotations

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "suite"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402
import torch_peers  # noqa: E402
from attention_common import BACKENDS, D, H, HK, kiln_tune, parse_args, results_header, sdpa_backend  # noqa: E402

OPTIONS = (("--seqs", {"default": "2048,4096,8192"}), ("--tokens", {"type": int, "default": 16384}),
           ("--p", {"type": float, "default": 0.1}))


def specs(b, s, p):
    """The forward and backward specs at batch b, length s; dropout p (0: none, no seed or offset)."""
    tag = f"b{b}_s{s}" + (f"_p{p:g}" if p > 0 else "")
    dims = {"q": [b, H, s, D], "k": [b, HK, s, D], "v": [b, HK, s, D]}
    seeds = {"seed": {"dims": [1, 1, 1, 1], "dtype": "int64"}, "offset": {"dims": [1, 1, 1, 1], "dtype": "int64"}}
    extra_t = seeds if p > 0 else {}
    extra_in = ["seed", "offset"] if p > 0 else []
    attrs = {"causal": True, **({"dropout": p} if p > 0 else {})}
    fwd = {"name": f"attn_fwd_{tag}", "io_dtype": "bf16",
           "tensors": {**{n: {"dims": d} for n, d in dims.items()}, **extra_t, "lse": {"dtype": "float32"}},
           "nodes": [{"name": "attn", "op": "sdpa", **attrs, "inputs": ["q", "k", "v", *extra_in],
                      "outputs": ["o", "lse"]}],
           "outputs": ["o", "lse"]}
    bwd = {"name": f"attn_bwd_{tag}", "io_dtype": "bf16",
           "tensors": {**{n: {"dims": d} for n, d in dims.items()}, "o": {"dims": [b, H, s, D]},
                       "do": {"dims": [b, H, s, D]}, "stats": {"dims": [b, H, s, 1], "dtype": "float32"}, **extra_t},
           "nodes": [{"name": "grad", "op": "sdpa_backward", **attrs,
                      "inputs": ["q", "k", "v", "o", "do", "stats", *extra_in], "outputs": ["dq", "dk", "dv"]}],
           "outputs": ["dq", "dk", "dv"]}
    return fwd, bwd


def fwd_flops(b, s):
    return 4.0 * b * H * s * s * D * 0.5


def torch_steps(backend, q, k, v, dout, p):
    """(forward, forward + backward) under one backend with dropout p; raises where the backend cannot run it."""
    from torch.nn.attention import sdpa_kernel
    chosen = sdpa_backend(backend)
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))

    def forward():
        with sdpa_kernel([chosen]):
            return F.scaled_dot_product_attention(qg, kg, vg, dropout_p=p, is_causal=True, enable_gqa=True)

    def train():
        o = forward()
        torch.autograd.grad(o, (qg, kg, vg), dout)
    train()
    return forward, train


def kiln_side(a, out, db, b, s, p, q, k, v, dout, row, key):
    """Tunes and times Kiln's forward, backward and both at dropout p; row[key + ...] gets the figures."""
    paths = []
    for spec in specs(b, s, p):
        path = out / f"{spec['name']}.json"
        path.write_text(json.dumps(spec, indent=1))
        paths.append(path)
        rc, secs = kiln_tune(a.kiln, path, db, a.tune_timeout, out / f"tune_{spec['name']}.txt")
        row[f"{key}_tune_{spec['nodes'][0]['op']}"] = [rc, secs]
        print(f"[ dropout ] s={s} b={b} p={p:g}: kiln tune {spec['name']} exit {rc} in {secs} s", flush=True)
    planner = kiln.Planner(store=str(db))
    fwd, bwd = planner.obtain(str(paths[0])), planner.obtain(str(paths[1]))
    row[f"{key}_plans"] = [[fwd.source, fwd.config], [bwd.source, bwd.config]]
    o = torch.empty(b, H, s, D, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(b, H, s, 1, device="cuda", dtype=torch.float32)
    seeds = {}
    if p > 0:
        seeds = {"seed": torch.full((1, 1, 1, 1), 1234, device="cuda", dtype=torch.int64),
                 "offset": torch.zeros((1, 1, 1, 1), device="cuda", dtype=torch.int64)}
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    wf = torch.empty(max(1, fwd.workspace_bytes), device="cuda", dtype=torch.uint8)
    wb = torch.empty(max(1, bwd.workspace_bytes), device="cuda", dtype=torch.uint8)

    def forward():
        fwd(q=q, k=k, v=v, o=o, lse=lse, workspace=wf, **seeds)

    def backward():
        bwd(q=q, k=k, v=v, o=o, do=dout, stats=lse, dq=dq, dk=dk, dv=dv, workspace=wb, **seeds)

    def train():
        forward()
        backward()
    forward()
    for name, fn in (("fwd", forward), ("bwd", backward), ("train", train)):
        row[f"{key}_{name}_ms"] = torch_peers.time_gpu(fn, a.samples)["ms"]
    if p > 0:  # the numerics are the tune's (the probe and the references); here only that the outputs are finite
        row[f"{key}_finite"] = bool(torch.isfinite(dq.float()).all() and torch.isfinite(dv.float()).all())
    print(f"[ dropout ] s={s} kiln p={p:g}: fwd {row[f'{key}_fwd_ms']:.3f} ms, bwd {row[f'{key}_bwd_ms']:.3f} ms, "
          f"step {row[f'{key}_train_ms']:.3f} ms ({fwd.config} / {bwd.config})", flush=True)


def main():
    a, out = parse_args(__doc__, OPTIONS)
    if not 0 < a.p < 1:
        raise SystemExit(f"--p must be in (0, 1), got {a.p}")
    db = out / "dropout.db"
    results = results_header(__doc__.strip().splitlines()[4:])
    results["p"] = a.p
    for s in (int(x) for x in a.seqs.split(",")):
        b = max(1, a.tokens // s)
        row = {"b": b, "s": s, "fwd_tflop": fwd_flops(b, s) / 1e12}
        g = torch.Generator(device="cuda").manual_seed(s)
        q = torch.randn(b, H, s, D, device="cuda", generator=g).bfloat16()
        k = torch.randn(b, HK, s, D, device="cuda", generator=g).bfloat16()
        v = torch.randn(b, HK, s, D, device="cuda", generator=g).bfloat16()
        dout = torch.randn(b, H, s, D, device="cuda", generator=g).bfloat16()
        for p, key in ((a.p, "kiln"), (0.0, "kiln_nodrop")):
            try:
                kiln_side(a, out, db, b, s, p, q, k, v, dout, row, key)
            except Exception as e:  # noqa: BLE001 - a failure is a result here, written down
                row[f"{key}_error"] = str(e)[:400]
                print(f"[ dropout ] s={s} {key} failed: {e}", flush=True)
        for backend in BACKENDS:
            try:
                forward, train = torch_steps(backend, q, k, v, dout, a.p)
                row[f"torch_{backend}_fwd_ms"] = torch_peers.time_gpu(forward, a.samples)["ms"]
                row[f"torch_{backend}_train_ms"] = torch_peers.time_gpu(train, a.samples)["ms"]
                print(f"[ dropout ] s={s} torch {backend} p={a.p:g}: fwd {row[f'torch_{backend}_fwd_ms']:.3f} ms, "
                      f"step {row[f'torch_{backend}_train_ms']:.3f} ms", flush=True)
            except Exception as e:  # noqa: BLE001
                row[f"torch_{backend}_error"] = str(e)[:300]
                print(f"[ dropout ] s={s} torch {backend} did not run: {str(e)[:160]}", flush=True)
            torch.cuda.empty_cache()
        best = [row[f"torch_{b_}_train_ms"] for b_ in BACKENDS if f"torch_{b_}_train_ms" in row]
        if best and "kiln_train_ms" in row:
            row["kiln_step_over_best_torch"] = min(best) / row["kiln_train_ms"]
            print(f"[ dropout ] s={s}: Kiln's step {row['kiln_step_over_best_torch']:.3f}x PyTorch's best "
                  f"({min(best):.3f} ms against {row['kiln_train_ms']:.3f})", flush=True)
        results["rows"].append(row)
        (out / "attention_dropout.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
