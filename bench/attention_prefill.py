#!/usr/bin/env python3
"""Ragged (THD) prefill (issue 36): Kiln's tuned ragged sdpa plan, which computes each sequence's own tokens only,
against PyTorch's SDPA backends on the same batch padded to its longest sequence; causal, Llama-3.1-8B heads (32
query heads over 8 key heads, head dim 128), bf16, in one process on one GPU.

  python3 bench/attention_prefill.py --kiln build/kiln --out OUT [--seqs 1024,4096] [--batch 8]

For each longest length S: B sequences whose lengths are drawn uniformly from S/8..S (the longest set to S). Kiln
tunes one graph, q [B,32,S,128], k and v [B,8,S,128] packed token-major (THD) with each entry's lengths and
offsets (`ragged`, `padding_mask`), into OUT/prefill.db (`kiln tune`: every engine configuration measured, the
numerics gate on), and serves it (kiln.Planner from the store) on the sequences packed back to back. PyTorch runs
F.scaled_dot_product_attention(is_causal=True) on the padded [B,H,S,128] tensors under each SDPA backend (cuDNN,
flash, efficient; grouped heads by enable_gqa): causal top-left is exact for every valid row of a prefill (a
query sees only earlier keys of its own sequence), so the padding is PyTorch's extra work, not a wrong answer. Each
contestant is timed alone with bench/suite/torch_peers.time_gpu (median GPU time over CUDA events, cold L2 before
each sample). TFLOP/s counts the work of the real tokens, 2 H D len^2 per sequence (causal), for both. Kiln's
output is checked against the padded fp32 attention on the valid rows (max |difference|). Writes
OUT/attention_prefill.json and prints a line per measurement.
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
from attention_common import BACKENDS, D, H, HK, kiln_tune, parse_args, results_header, sdpa_step  # noqa: E402


def spec(b, s):
    def thd(heads):
        return {"dims": [b, heads, s, D], "strides": [s * heads * D, D, heads * D, 1]}
    i32 = {"dtype": "int32"}
    tensors = {"q": thd(H), "k": thd(HK), "v": thd(HK),
               "seq_len_q": {"dims": [b, 1, 1, 1], **i32}, "seq_len_kv": {"dims": [b, 1, 1, 1], **i32}}
    tensors.update({n: {"dims": [b + 1, 1, 1, 1], **i32} for n in ("off_q", "off_kv")})  # q and o, k and v share
    return {"name": f"prefill_ragged_b{b}_s{s}", "io_dtype": "bf16", "tensors": tensors,
            "nodes": [{"name": "attn", "op": "sdpa", "causal": True, "padding_mask": True, "ragged": True,
                       "inputs": ["q", "k", "v", "seq_len_q", "seq_len_kv", "off_q", "off_kv", "off_kv", "off_q"],
                       "outputs": ["o"]}],
            "outputs": ["o"]}


OPTIONS = (("--seqs", {"default": "1024,4096"}), ("--batch", {"type": int, "default": 8}))


def thd_view(buf, b, heads, s):
    """A packed [B*S, heads, D] buffer as the [B, heads, S, D] token-major tensor the graph declares."""
    return buf.view(b, s, heads, D).permute(0, 2, 1, 3)


def measure(a, out, db, planners, b, s):
    row = {"b": b, "s": s}
    path = out / f"prefill_b{b}_s{s}.json"
    path.write_text(json.dumps(spec(b, s), indent=1))
    row["tune_exit"], row["tune_s"] = kiln_tune(a.kiln, path, db, a.tune_timeout, out / f"tune_b{b}_s{s}.txt")
    print(f"[ prefill ] b={b} s={s}: kiln tune exit {row['tune_exit']} in {row['tune_s']} s", flush=True)
    g = torch.Generator(device="cuda").manual_seed(s)
    lens = torch.randint(s // 8, s + 1, (b,), generator=g, device="cuda")
    lens[0] = s
    row["lengths"] = lens.tolist()
    row["tflop"] = sum(2.0 * H * D * n * n for n in row["lengths"]) / 1e12
    q, k, v = (torch.randn(b, n, s, D, device="cuda", generator=g).bfloat16() for n in (H, HK, HK))
    valid = torch.arange(s, device="cuda").reshape(1, s) < lens.reshape(b, 1)  # [B, S]: each entry's own rows
    # Packed back to back (no gaps): token t of the buffers holds entry e's row t - start[e].
    start = torch.cat([torch.zeros(1, device="cuda", dtype=torch.int64), lens.cumsum(0)])
    bufs = {}
    for name, x, heads in (("q", q, H), ("k", k, HK), ("v", v, HK)):
        buf = torch.zeros(b * s, heads, D, device="cuda", dtype=torch.bfloat16)
        buf[: int(start[-1])] = x.permute(0, 2, 1, 3)[valid]  # valid rows in entry order
        bufs[name] = buf
    o_buf = torch.full((b * s, H, D), float("nan"), device="cuda", dtype=torch.bfloat16)
    off_q, off_kv = ((start * heads * D).to(torch.int32).reshape(b + 1, 1, 1, 1) for heads in (H, HK))
    lq = lens.to(torch.int32).reshape(b, 1, 1, 1)
    try:
        if not planners:  # opened once the store exists (after the first tune)
            planners.append(kiln.Planner(store=str(db)))
        plan = planners[0].obtain(str(path))
        row["kiln_source"], row["kiln_config"] = plan.source, plan.config
        ws = torch.empty(max(1, plan.workspace_bytes), device="cuda", dtype=torch.uint8)

        def call():
            plan(q=thd_view(bufs["q"], b, H, s), k=thd_view(bufs["k"], b, HK, s), v=thd_view(bufs["v"], b, HK, s),
                 seq_len_q=lq, seq_len_kv=lq, off_q=off_q, off_kv=off_kv, o=thd_view(o_buf, b, H, s), workspace=ws)
        res = torch_peers.time_gpu(call, a.samples)
        row["kiln_ms"] = res["ms"]
        print(f"[ prefill ] b={b} s={s} kiln ragged {res['ms']:.3f} ms = {row['tflop'] / res['ms'] * 1e3:.0f} "
              f"TFLOP/s of real tokens ({plan.source}, {plan.config})", flush=True)
        call()
        # fp32 attention per sequence and group of heads (the whole batch's scores would not fit the card).
        err, group = 0.0, H // HK
        for e, n in enumerate(row["lengths"]):
            for kh in range(HK):
                hs = slice(kh * group, (kh + 1) * group)
                kv = [x[e, kh:kh + 1, :n].float().expand(group, n, D) for x in (k, v)]
                want = F.scaled_dot_product_attention(q[e, hs, :n].float(), *kv, is_causal=True)
                got = o_buf[int(start[e]): int(start[e]) + n, hs].float().permute(1, 0, 2)
                err = max(err, (got - want).abs().max().item())
        row["kiln_max_abs_err"] = err
        print(f"[ prefill ] b={b} s={s} kiln max |err| {row['kiln_max_abs_err']:.2e} over the valid rows", flush=True)
    except Exception as e:  # noqa: BLE001 - a failure is a result here, written down
        row["kiln_error"] = str(e)[:400]
        print(f"[ prefill ] b={b} s={s} kiln failed: {e}", flush=True)
    best = None
    for backend in BACKENDS:
        try:
            r2 = torch_peers.time_gpu(sdpa_step(backend, q, k, v, is_causal=True), a.samples)
            row[f"torch_{backend}_ms"] = r2["ms"]
            best = r2["ms"] if best is None else min(best, r2["ms"])
            print(f"[ prefill ] b={b} s={s} torch {backend} (padded) {r2['ms']:.3f} ms", flush=True)
        except Exception as e:  # noqa: BLE001
            row[f"torch_{backend}_error"] = str(e)[:300]
            print(f"[ prefill ] b={b} s={s} torch {backend} did not run: {str(e)[:120]}", flush=True)
        torch.cuda.empty_cache()
    if best is not None and "kiln_ms" in row:
        row["kiln_over_best_torch"] = best / row["kiln_ms"]
        print(f"[ prefill ] b={b} s={s}: kiln {row['kiln_over_best_torch']:.2f}x PyTorch's best backend on the "
              f"padded batch ({sum(row['lengths'])} real tokens of {b * s})", flush=True)
    return row


def main():
    a, out = parse_args(__doc__, OPTIONS)
    results = results_header(__doc__.strip().splitlines()[5:])
    planners = []
    for s in (int(x) for x in a.seqs.split(",")):
        results["rows"].append(measure(a, out, out / "prefill.db", planners, a.batch, s))
        (out / "attention_prefill.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
