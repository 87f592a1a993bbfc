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
halved for causal (cuDNN Frontend's benchmarks count it so). With --fp8 (issue 36), Kiln's tuned sdpa_fp8_backward
plan too: q, k, v, o (Kiln's bf16 forward's), do cast to e4m3 at per-tensor scales from their amax (448 / amax),
P at 448, and dS and the gradients at 384 over the amax a first call reports (delayed scaling's recipe, one step
late); its gradients, read back at their scales, against the bf16 plan's (max |difference| over max |gradient|).
Writes OUT/attention_backward.json and prints a line per measurement as it goes.
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
from attention_common import (BACKENDS, D, H, HK, SEQ_OPTIONS, kiln_tune, parse_args, results_header,  # noqa: E402
                              sdpa_backend)


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


FP8_BWD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_do", "descale_s", "descale_dp",
                  "scale_s", "scale_dq", "scale_dk", "scale_dv", "scale_dp")
FP8_BWD_OUTS = ("dq", "dk", "dv", "amax_dq", "amax_dk", "amax_dv", "amax_dp")


def fp8_spec(b, s, causal=True):
    """The FP8 backward pass at batch b, length s (sdpa_fp8_backward; head dims of 128, as cuDNN takes on SM 9.x)."""
    dims = {"q": [b, H, s, D], "k": [b, HK, s, D], "v": [b, HK, s, D], "o": [b, H, s, D], "do": [b, H, s, D]}
    tensors = {n: {"dims": d} for n, d in dims.items()}
    tensors["stats"] = {"dims": [b, H, s, 1], "dtype": "float32"}
    tensors.update({n: {"dims": [1, 1, 1, 1], "dtype": "float32"} for n in FP8_BWD_SCALES})
    tensors.update({n: {"dtype": "float32"} for n in FP8_BWD_OUTS[3:]})
    return {"name": f"attn_fp8_bwd_b{b}_s{s}", "io_dtype": "fp8_e4m3", "tensors": tensors,
            "nodes": [{"name": "grad", "op": "sdpa_fp8_backward", "causal": causal,
                       "inputs": ["q", "k", "v", "o", "do", "stats", *FP8_BWD_SCALES], "outputs": list(FP8_BWD_OUTS)}],
            "outputs": list(FP8_BWD_OUTS)}


def fp8_of(x):
    """x cast to e4m3 at scale 448 / amax, and the descale (one tensor, [1, 1, 1, 1])."""
    amax = x.abs().amax().float().clamp(min=1e-12)
    scale = 448.0 / amax
    return (x.float() * scale).to(torch.float8_e4m3fn), (1.0 / scale).reshape(1, 1, 1, 1)


def fp8_backward(a, out, db, row, b, s, q, k, v, o, lse, dout, grads16):
    """Tunes, serves and times the FP8 backward pass; compares its gradients with the bf16 plan's (grads16)."""
    path = out / f"attn_fp8_bwd_b{b}_s{s}.json"
    path.write_text(json.dumps(fp8_spec(b, s), indent=1))
    row["fp8_tune_exit"], row["fp8_tune_s"] = kiln_tune(a.kiln, path, db, a.tune_timeout, out / f"tune_fp8_s{s}.txt")
    print(f"[ bwd ] s={s} b={b}: kiln tune fp8 exit {row['fp8_tune_exit']} in {row['fp8_tune_s']} s", flush=True)
    plan = kiln.Planner(store=str(db)).obtain(str(path))
    row["kiln_fp8_source"], row["kiln_fp8_config"] = plan.source, plan.config
    one = torch.ones(1, 1, 1, 1, device="cuda")
    (q8, sq), (k8, sk), (v8, sv), (o8, so), (do8, sdo) = (fp8_of(x) for x in (q, k, v, o, dout))
    sc = {"descale_q": sq, "descale_k": sk, "descale_v": sv, "descale_o": so, "descale_do": sdo,
          "descale_s": one / 448.0, "scale_s": one * 448.0}
    sc.update({n: one.clone() for n in ("descale_dp", "scale_dq", "scale_dk", "scale_dv", "scale_dp")})
    g8 = [torch.empty_like(x, dtype=torch.float8_e4m3fn) for x in (q, k, v)]
    amax = [torch.zeros(1, 1, 1, 1, device="cuda") for _ in range(4)]
    ws = torch.empty(max(1, plan.workspace_bytes), device="cuda", dtype=torch.uint8)

    def call():
        plan(q=q8, k=k8, v=v8, o=o8, do=do8, stats=lse, workspace=ws, **sc, **dict(zip(FP8_BWD_OUTS, g8 + amax)))
    call()  # the amax of this step set the next step's scales (delayed scaling)
    torch.cuda.synchronize()
    for name, a_ in zip(("scale_dq", "scale_dk", "scale_dv", "scale_dp"), amax):
        sc[name] = one * 384.0 / a_.clamp(min=1e-12)  # room below e4m3's 448 for the next step's growth
    sc["descale_dp"] = 1.0 / sc["scale_dp"]
    res = torch_peers.time_gpu(call, a.samples)
    row["kiln_fp8_ms"] = res["ms"]
    print(f"[ bwd ] s={s} kiln fp8 {res['ms']:.3f} ms = {row['tflop'] / res['ms'] * 1e3:.0f} TFLOP/s "
          f"({plan.source}, {plan.config})", flush=True)
    call()
    torch.cuda.synchronize()
    for name, got, ref, scale in zip(("dq", "dk", "dv"), g8, grads16, ("scale_dq", "scale_dk", "scale_dv")):
        want = ref.float()
        row[f"fp8_{name}_rel_err"] = ((got.float() / sc[scale] - want).abs().max() / want.abs().max()).item()
    print(f"[ bwd ] s={s} fp8 gradients vs bf16: max |diff| / max |grad| dq {row['fp8_dq_rel_err']:.3f}, dk "
          f"{row['fp8_dk_rel_err']:.3f}, dv {row['fp8_dv_rel_err']:.3f}", flush=True)
    if "kiln_ms" in row:
        row["fp8_speedup_over_bf16"] = row["kiln_ms"] / row["kiln_fp8_ms"]
        print(f"[ bwd ] s={s} fp8 over bf16 backward (Kiln, same run): {row['fp8_speedup_over_bf16']:.2f}x", flush=True)


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
    a, out = parse_args(__doc__, SEQ_OPTIONS + (("--fp8", {"action": "store_true"}),))
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
            if a.fp8:
                bwd(q=q, k=k, v=v, o=o, do=dout, stats=lse, dq=dq, dk=dk, dv=dv, workspace=ws)
                try:
                    fp8_backward(a, out, db, row, b, s, q, k, v, o, lse, dout, (dq, dk, dv))
                except Exception as e:  # noqa: BLE001 - a failure is a result here, written down
                    row["kiln_fp8_error"] = str(e)[:400]
                    print(f"[ bwd ] s={s} kiln fp8 failed: {e}", flush=True)
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
