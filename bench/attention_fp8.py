#!/usr/bin/env python3
"""FP8 attention's forward pass (issue 36): Kiln's tuned sdpa_fp8 plan against Kiln's tuned bf16 sdpa and PyTorch's
SDPA backends (bf16), causal, Llama-3.1-8B heads (32 query heads over 8 key heads, head dim 128), in one process on
one GPU.

  python3 bench/attention_fp8.py --kiln build/kiln --out OUT [--seqs 4096,8192,16384] [--tokens 16384]

For each sequence length S (batch = tokens / S): Kiln tunes the bf16 forward and the FP8 forward into OUT/fwd.db
(`kiln tune`: every engine configuration measured, the numerics gate on) and serves them (kiln.Planner from the
store). The FP8 inputs are the bf16 ones cast to e4m3 at per-tensor scales from their amax (delayed scaling's
recipe: scale = 448 / amax, descale its inverse); P is scaled by 448 and read back at 1/448; o at 1. Each
contestant is timed alone with bench/suite/torch_peers.time_gpu (median GPU time over CUDA events, cold L2 before
each sample): Kiln's FP8 plan, Kiln's bf16 plan, and F.scaled_dot_product_attention (bf16) under each SDPA backend
that runs (cuDNN, flash, efficient; grouped heads by enable_gqa). TFLOP/s counts the forward as 4 B H S^2 D,
halved for causal (cuDNN Frontend's benchmarks count it so). The FP8 output is checked against the bf16 one
(max |difference| relative to max |o|). Writes OUT/attention_fp8.json and prints a line per measurement.
"""
from __future__ import annotations

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "suite"))

import torch  # noqa: E402

import kiln  # noqa: E402
import torch_peers  # noqa: E402
from attention_common import BACKENDS, D, H, HK, kiln_tune, parse_args, results_header, sdpa_step  # noqa: E402
SCALES = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")


def specs(b, s, causal=True):
    dims = {"q": [b, H, s, D], "k": [b, HK, s, D], "v": [b, HK, s, D]}
    bf16 = {"name": f"attn_bf16_b{b}_s{s}", "io_dtype": "bf16",
            "tensors": {n: {"dims": d} for n, d in dims.items()},
            "nodes": [{"name": "attn", "op": "sdpa", "causal": causal, "inputs": ["q", "k", "v"], "outputs": ["o"]}],
            "outputs": ["o"]}
    tensors = {n: {"dims": d} for n, d in dims.items()}
    tensors.update({n: {"dims": [1, 1, 1, 1], "dtype": "float32"} for n in SCALES})
    tensors.update({"o": {"dtype": "fp8_e4m3"}, "amax_o": {"dtype": "float32"}})
    fp8 = {"name": f"attn_fp8_b{b}_s{s}", "io_dtype": "fp8_e4m3", "tensors": tensors,
           "nodes": [{"name": "attn", "op": "sdpa_fp8", "causal": causal, "inputs": ["q", "k", "v", *SCALES],
                      "outputs": ["o", "amax_o"]}],
           "outputs": ["o", "amax_o"]}
    return bf16, fp8


def flops(b, s, causal=True):
    return 4.0 * b * H * s * s * D * (0.5 if causal else 1.0)


def fp8_of(x):
    """x cast to e4m3 at scale 448 / amax, and the descale (one tensor, [1, 1, 1, 1])."""
    amax = x.abs().amax().float().clamp(min=1e-12)
    scale = 448.0 / amax
    return (x.float() * scale).to(torch.float8_e4m3fn), (1.0 / scale).reshape(1, 1, 1, 1)


def main():
    a, out = parse_args(__doc__)
    db = out / "fwd.db"
    results = results_header(__doc__.strip().splitlines()[5:])
    for s in (int(x) for x in a.seqs.split(",")):
        b = max(1, a.tokens // s)
        row = {"b": b, "s": s, "tflop": flops(b, s) / 1e12}
        paths = {}
        for tag, spec in zip(("bf16", "fp8"), specs(b, s)):
            paths[tag] = out / f"{spec['name']}.json"
            paths[tag].write_text(json.dumps(spec, indent=1))
            row[f"{tag}_tune_exit"], row[f"{tag}_tune_s"] = kiln_tune(a.kiln, paths[tag], db, a.tune_timeout,
                                                                      out / f"tune_{tag}_s{s}.txt")
            print(f"[ fp8 ] s={s} b={b}: kiln tune {tag} exit {row[f'{tag}_tune_exit']} in {row[f'{tag}_tune_s']} s",
                  flush=True)
        g = torch.Generator(device="cuda").manual_seed(s)
        q = torch.randn(b, H, s, D, device="cuda", generator=g).bfloat16()
        k = torch.randn(b, HK, s, D, device="cuda", generator=g).bfloat16()
        v = torch.randn(b, HK, s, D, device="cuda", generator=g).bfloat16()
        planner = kiln.Planner(store=str(db))
        o16 = torch.empty(b, H, s, D, device="cuda", dtype=torch.bfloat16)
        for tag in ("bf16", "fp8"):
            try:
                plan = planner.obtain(str(paths[tag]))
                row[f"kiln_{tag}_source"], row[f"kiln_{tag}_config"] = plan.source, plan.config
                ws = torch.empty(max(1, plan.workspace_bytes), device="cuda", dtype=torch.uint8)
                if tag == "bf16":
                    def call():
                        plan(q=q, k=k, v=v, o=o16, workspace=ws)
                else:
                    (q8, dq), (k8, dk), (v8, dv) = fp8_of(q), fp8_of(k), fp8_of(v)
                    one = torch.ones(1, 1, 1, 1, device="cuda")
                    sc = {"descale_q": dq, "descale_k": dk, "descale_v": dv, "descale_s": one / 448.0,
                          "scale_s": one * 448.0, "scale_o": one}
                    o8 = torch.empty(b, H, s, D, device="cuda", dtype=torch.float8_e4m3fn)
                    amax = torch.zeros(1, 1, 1, 1, device="cuda")

                    def call():
                        plan(q=q8, k=k8, v=v8, o=o8, amax_o=amax, workspace=ws, **sc)
                res = torch_peers.time_gpu(call, a.samples)
                row[f"kiln_{tag}_ms"] = res["ms"]
                print(f"[ fp8 ] s={s} kiln {tag} {res['ms']:.3f} ms = {row['tflop'] / res['ms'] * 1e3:.0f} TFLOP/s "
                      f"({plan.source}, {plan.config})", flush=True)
                if tag == "fp8":
                    call()
                    torch.cuda.synchronize()
                    ref = o16.float()
                    row["fp8_vs_bf16_max_abs"] = (o8.float() - ref).abs().max().item()
                    row["bf16_max_abs_o"] = ref.abs().max().item()
                    row["fp8_amax_o"] = amax.item()
                    print(f"[ fp8 ] s={s} fp8 o vs bf16 o: max |diff| {row['fp8_vs_bf16_max_abs']:.4f} "
                          f"(max |o| {row['bf16_max_abs_o']:.3f}, amax_o {row['fp8_amax_o']:.3f})", flush=True)
            except Exception as e:  # noqa: BLE001 - a failure is a result here, written down
                row[f"kiln_{tag}_error"] = str(e)[:400]
                print(f"[ fp8 ] s={s} kiln {tag} failed: {e}", flush=True)
        if "kiln_fp8_ms" in row and "kiln_bf16_ms" in row:
            row["fp8_speedup_over_bf16"] = row["kiln_bf16_ms"] / row["kiln_fp8_ms"]
            print(f"[ fp8 ] s={s} fp8 over bf16 (Kiln, same run): {row['fp8_speedup_over_bf16']:.2f}x", flush=True)
        for backend in BACKENDS:
            try:
                res = torch_peers.time_gpu(sdpa_step(backend, q, k, v, is_causal=True), a.samples)
                row[f"torch_{backend}_ms"] = res["ms"]
                print(f"[ fp8 ] s={s} torch bf16 {backend} {res['ms']:.3f} ms = "
                      f"{row['tflop'] / res['ms'] * 1e3:.0f} TFLOP/s", flush=True)
            except Exception as e:  # noqa: BLE001
                row[f"torch_{backend}_error"] = str(e)[:300]
                print(f"[ fp8 ] s={s} torch {backend} did not run: {str(e)[:160]}", flush=True)
            torch.cuda.empty_cache()
        results["rows"].append(row)
        (out / "attention_fp8.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
