#!/usr/bin/env python3
"""Attention's backward pass (issue 36): Kiln's tuned sdpa_backward plan against PyTorch's SDPA backward backends,
bf16, causal, Llama-3.1-8B heads (32 query heads over 8 key heads, head dim 128), in one process on one GPU.

  python3 bench/attention_backward.py --kiln build/kiln --out OUT [--seqs 4096,8192,16384] [--tokens 16384]

For each sequence length S (batch = tokens / S): Kiln tunes the backward graph into OUT/bwd.db (`kiln tune`, every
engine configuration measured, the numerics gate on) and serves it (kiln.Planner from the store); its o and
statistics come from Kiln's forward plan, as in training. Each contestant's backward is timed alone with
bench/suite/torch_peers.time_gpu (median GPU time over CUDA events, cold L2 before each sample): Kiln's plan call,
and torch.autograd.grad through F.scaled_dot_product_attention under each SDPA backend that runs (cuDNN, flash,
efficient; grouped heads by enable_gqa). TFLOP/s counts the backward as 2.5 times the forward's 4 B H S^2 D,
halved for causal (cuDNN Frontend's benchmarks count it so). Writes OUT/attention_backward.json and prints a line
per measurement as it goes.
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


def specs(b, s, causal=True):
    dims = {"q": [b, H, s, D], "k": [b, HK, s, D], "v": [b, HK, s, D]}
    fwd = {"name": f"attn_fwd_b{b}_s{s}", "io_dtype": "bf16",
           "tensors": {**{n: {"dims": d} for n, d in dims.items()}, "lse": {"dtype": "float32"}},
           "nodes": [{"name": "attn", "op": "sdpa", "causal": causal, "inputs": ["q", "k", "v"],
                      "outputs": ["o", "lse"]}],
           "outputs": ["o", "lse"]}
    bwd = {"name": f"attn_bwd_b{b}_s{s}", "io_dtype": "bf16",
           "tensors": {**{n: {"dims": d} for n, d in dims.items()}, "o": {"dims": [b, H, s, D]},
                       "do": {"dims": [b, H, s, D]}, "stats": {"dims": [b, H, s, 1], "dtype": "float32"}},
           "nodes": [{"name": "grad", "op": "sdpa_backward", "causal": causal,
                      "inputs": ["q", "k", "v", "o", "do", "stats"], "outputs": ["dq", "dk", "dv"]}],
           "outputs": ["dq", "dk", "dv"]}
    return fwd, bwd


def flops(b, s, causal=True):
    return 2.5 * 4.0 * b * H * s * s * D * (0.5 if causal else 1.0)


def torch_backward(backend, q, k, v, dout):
    from torch.nn.attention import sdpa_kernel
    chosen = sdpa_backend(backend)
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    with sdpa_kernel([chosen]):
        o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, enable_gqa=True)

        def step():
            torch.autograd.grad(o, (qg, kg, vg), dout, retain_graph=True)
        step()
    return step


def main():
    a, out = parse_args(__doc__)
    db = out / "bwd.db"
    results = results_header(__doc__.strip().splitlines()[4:])
    for s in (int(x) for x in a.seqs.split(",")):
        b = max(1, a.tokens // s)
        fwd_spec, bwd_spec = specs(b, s)
        paths = []
        for spec in (fwd_spec, bwd_spec):
            p = out / f"{spec['name']}.json"
            p.write_text(json.dumps(spec, indent=1))
            paths.append(p)
        row = {"b": b, "s": s, "tflop": flops(b, s) / 1e12}
        row["tune_exit"], row["tune_s"] = kiln_tune(a.kiln, paths[1], db, a.tune_timeout, out / f"tune_s{s}.txt")
        print(f"[ bwd ] s={s} b={b}: kiln tune exit {row['tune_exit']} in {row['tune_s']} s", flush=True)
        g = torch.Generator(device="cuda").manual_seed(s)
        q = torch.randn(b, H, s, D, device="cuda", generator=g).bfloat16()
        k = torch.randn(b, HK, s, D, device="cuda", generator=g).bfloat16()
        v = torch.randn(b, HK, s, D, device="cuda", generator=g).bfloat16()
        dout = torch.randn(b, H, s, D, device="cuda", generator=g).bfloat16()
        try:
            planner = kiln.Planner(store=str(db))
            fwd = planner.obtain(str(paths[0]))
            bwd = planner.obtain(str(paths[1]))
            row["kiln_source"], row["kiln_config"] = bwd.source, bwd.config
            o = torch.empty(b, H, s, D, device="cuda", dtype=torch.bfloat16)
            lse = torch.empty(b, H, s, 1, device="cuda", dtype=torch.float32)
            fwd(q=q, k=k, v=v, o=o, lse=lse)
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            ws = torch.empty(max(1, bwd.workspace_bytes), device="cuda", dtype=torch.uint8)
            res = torch_peers.time_gpu(lambda: bwd(q=q, k=k, v=v, o=o, do=dout, stats=lse, dq=dq, dk=dk, dv=dv,
                                                   workspace=ws), a.samples)
            row["kiln_ms"] = res["ms"]
            print(f"[ bwd ] s={s} kiln {res['ms']:.3f} ms = {row['tflop'] / res['ms'] * 1e3:.0f} TFLOP/s "
                  f"({bwd.source}, {bwd.config})", flush=True)
        except Exception as e:  # noqa: BLE001 - a failure is a result here, written down
            row["kiln_error"] = str(e)[:400]
            print(f"[ bwd ] s={s} kiln failed: {e}", flush=True)
        for backend in BACKENDS:
            try:
                res = torch_peers.time_gpu(torch_backward(backend, q, k, v, dout), a.samples)
                row[f"torch_{backend}_ms"] = res["ms"]
                print(f"[ bwd ] s={s} torch {backend} {res['ms']:.3f} ms = "
                      f"{row['tflop'] / res['ms'] * 1e3:.0f} TFLOP/s", flush=True)
            except Exception as e:  # noqa: BLE001
                row[f"torch_{backend}_error"] = str(e)[:300]
                print(f"[ bwd ] s={s} torch {backend} did not run: {str(e)[:160]}", flush=True)
            torch.cuda.empty_cache()
        results["rows"].append(row)
        (out / "attention_backward.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
