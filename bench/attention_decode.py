#!/usr/bin/env python3
"""Decode over paged K/V caches (issue 36): Kiln's tuned paged sdpa plan against PyTorch's SDPA backends on padded
dense tensors, one query token per sequence, Llama-3.1-8B heads (32 query heads over 8 key heads, head dim 128),
bf16, in one process on one GPU.

  python3 bench/attention_decode.py --kiln build/kiln --out OUT [--batches 1,8,32,64,256] [--ctxs 1024,4096,32768]

For each batch B and context C (pairs with B * C over --max-tokens, 2^20, left out: the tune's device reference
holds each cache as doubles, its value and its magnitude, 16 bytes an element, so 2^21 tokens of these heads need
64 GiB for the caches alone, past an 80 GB card once the run's own tensors are counted): Kiln
tunes one graph, q [B,32,1,128] over caches [B*C/64, 8, 64, 128] read through page tables [B,1,C/64,1] with each
entry's lengths (`paged_kv`, `padding_mask`), into OUT/decode.db (`kiln tune`: every engine configuration measured,
the numerics gate on), and serves it (kiln.Planner from the store). The page tables are a random permutation of
the cache's blocks (a fragmented cache). Two sets of lengths, one plan (lengths and tables are data): "full", every
entry C keys; "mixed", each entry's keys drawn uniformly from 1..C. PyTorch runs F.scaled_dot_product_attention on
the dense [B,8,C,128] K/V gathered from the same caches under each SDPA backend (cuDNN, flash, efficient; grouped
heads by enable_gqa): without a mask for "full", with a boolean key mask [B,1,1,C] for "mixed" (a backend that
takes no mask is written down as not running). Each contestant is timed alone with
bench/suite/torch_peers.time_gpu (median GPU time over CUDA events, cold L2 before each sample). GB/s counts the
K/V bytes the entry's lengths need (both contestants the same: padding read by PyTorch is its cost, not work).
Kiln's output is checked against the masked dense attention in fp32 (max |difference|). Writes
OUT/attention_decode.json and prints a line per measurement.
"""
from __future__ import annotations

import json
import sys
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "suite"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402
import torch_peers  # noqa: E402
from attention_common import BACKENDS, D, H, HK, kiln_tune, parse_args, results_header, sdpa_step  # noqa: E402

BLOCK = 64  # keys a cache block holds


def spec(b, c):
    pages, blocks = c // BLOCK, b * (c // BLOCK)
    return {"name": f"decode_b{b}_c{c}", "io_dtype": "bf16",
            "tensors": {"q": {"dims": [b, H, 1, D]}, "k": {"dims": [blocks, HK, BLOCK, D]},
                        "v": {"dims": [blocks, HK, BLOCK, D]},
                        "seq_len_q": {"dims": [b, 1, 1, 1], "dtype": "int32"},
                        "seq_len_kv": {"dims": [b, 1, 1, 1], "dtype": "int32"},
                        "page_table_k": {"dims": [b, 1, pages, 1], "dtype": "int32"},
                        "page_table_v": {"dims": [b, 1, pages, 1], "dtype": "int32"}},
            "nodes": [{"name": "attn", "op": "sdpa", "padding_mask": True, "paged_kv": True,
                       "inputs": ["q", "k", "v", "seq_len_q", "seq_len_kv", "page_table_k", "page_table_v"],
                       "outputs": ["o"]}],
            "outputs": ["o"]}


OPTIONS = (("--batches", {"default": "1,8,32,64,256"}), ("--ctxs", {"default": "1024,4096,32768"}),
           ("--max-tokens", {"type": int, "default": 1 << 20}))


def dense_of(cache, table):
    """[B, HK, C, D]: each entry's keys gathered from the cache through its page table."""
    b, pages = table.shape[0], table.shape[2]
    blocks = cache[table.reshape(-1).long()]  # [B*pages, HK, BLOCK, D]
    return blocks.reshape(b, pages, HK, BLOCK, D).permute(0, 2, 1, 3, 4).reshape(b, HK, pages * BLOCK, D)


def measure(a, row, b, c, plan, inputs, lengths, tag):
    """One set of lengths: Kiln's plan, its check, and PyTorch's backends."""
    q, kc, vc, table, kd, vd = inputs
    lq = torch.ones(b, 1, 1, 1, device="cuda", dtype=torch.int32)
    lkv = lengths.reshape(b, 1, 1, 1).to(torch.int32)
    gbytes = 2 * lengths.sum().item() * HK * D * 2 / 1e9
    o = torch.empty(b, H, 1, D, device="cuda", dtype=torch.bfloat16)
    ws = torch.empty(max(1, plan.workspace_bytes), device="cuda", dtype=torch.uint8)

    def call():
        plan(q=q, k=kc, v=vc, seq_len_q=lq, seq_len_kv=lkv, page_table_k=table, page_table_v=table, o=o,
             workspace=ws)
    res = torch_peers.time_gpu(call, a.samples)
    row[f"{tag}_kiln_ms"] = res["ms"]
    print(f"[ decode ] b={b} c={c} {tag}: kiln {res['ms'] * 1e3:.1f} us = {gbytes / res['ms'] * 1e3:.0f} GB/s",
          flush=True)
    keys = torch.arange(c, device="cuda").reshape(1, 1, 1, c) < lengths.reshape(b, 1, 1, 1)
    call()
    ref = F.scaled_dot_product_attention(q.float(), kd.float(), vd.float(), attn_mask=keys, enable_gqa=True)
    torch.cuda.synchronize()
    row[f"{tag}_kiln_max_abs_err"] = (o.float() - ref).abs().max().item()
    mask = None if tag == "full" else keys
    best = None
    for backend in BACKENDS:
        try:
            r = torch_peers.time_gpu(sdpa_step(backend, q, kd, vd, attn_mask=mask), a.samples)
            row[f"{tag}_torch_{backend}_ms"] = r["ms"]
            best = r["ms"] if best is None else min(best, r["ms"])
            print(f"[ decode ] b={b} c={c} {tag}: torch {backend} {r['ms'] * 1e3:.1f} us", flush=True)
        except Exception as e:  # noqa: BLE001 - a backend that does not run is a result, written down
            row[f"{tag}_torch_{backend}_error"] = str(e)[:300]
            print(f"[ decode ] b={b} c={c} {tag}: torch {backend} did not run: {str(e)[:120]}", flush=True)
    if best is not None:
        row[f"{tag}_kiln_over_best_torch"] = best / res["ms"]
        print(f"[ decode ] b={b} c={c} {tag}: kiln {best / res['ms']:.2f}x PyTorch's best backend "
              f"(kiln max |err| {row[f'{tag}_kiln_max_abs_err']:.2e})", flush=True)


def main():
    a, out = parse_args(__doc__, OPTIONS)
    db = out / "decode.db"
    results = results_header(__doc__.strip().splitlines()[5:])
    results["block_size"] = BLOCK
    planner = None
    for c in (int(x) for x in a.ctxs.split(",")):
        for b in (int(x) for x in a.batches.split(",")):
            if b * c > a.max_tokens:
                continue
            row = {"b": b, "c": c}
            path = out / f"decode_b{b}_c{c}.json"
            path.write_text(json.dumps(spec(b, c), indent=1))
            row["tune_exit"], row["tune_s"] = kiln_tune(a.kiln, path, db, a.tune_timeout, out / f"tune_b{b}_c{c}.txt")
            print(f"[ decode ] b={b} c={c}: kiln tune exit {row['tune_exit']} in {row['tune_s']} s", flush=True)
            g = torch.Generator(device="cuda").manual_seed(b * 100003 + c)
            blocks = b * (c // BLOCK)
            q = torch.randn(b, H, 1, D, device="cuda", generator=g).bfloat16()
            kc = torch.randn(blocks, HK, BLOCK, D, device="cuda", generator=g).bfloat16()
            vc = torch.randn(blocks, HK, BLOCK, D, device="cuda", generator=g).bfloat16()
            table = torch.randperm(blocks, device="cuda", generator=g).to(torch.int32).reshape(b, 1, c // BLOCK, 1)
            kd, vd = dense_of(kc, table), dense_of(vc, table)
            try:
                planner = planner or kiln.Planner(store=str(db))
                plan = planner.obtain(str(path))
                row["kiln_source"], row["kiln_config"] = plan.source, plan.config
                full = torch.full((b,), c, device="cuda", dtype=torch.int64)
                mixed = torch.randint(1, c + 1, (b,), device="cuda", generator=g)
                for tag, lengths in (("full", full), ("mixed", mixed)):
                    measure(a, row, b, c, plan, (q, kc, vc, table, kd, vd), lengths, tag)
            except Exception as e:  # noqa: BLE001 - a failure is a result here, written down
                row["kiln_error"] = str(e)[:400]
                print(f"[ decode ] b={b} c={c}: kiln failed: {e}", flush=True)
            del kc, vc, kd, vd
            torch.cuda.empty_cache()
            results["rows"].append(row)
            (out / "attention_decode.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
