"""What the attention benchmarks (bench/attention_{backward,fp8,decode,prefill}.py) share: the attention heads
(Llama-3.1-8B's by default; KILN_ATTN_HEADS="64,8" gives cuDNN Frontend's Llama-3.1 training preset, the shapes of its
published H200 figures), their command line, a `kiln tune` of one spec, the results' header, and PyTorch's SDPA by
backend name."""
from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import time

import torch


def _heads() -> tuple:
    """(query heads, key heads) from KILN_ATTN_HEADS ("H,HK"; default 32,8), checked: H a multiple of HK."""
    text = os.environ.get("KILN_ATTN_HEADS", "32,8")
    try:
        h, hk = (int(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"KILN_ATTN_HEADS must be 'H,HK' (two integers), got {text!r}")
    if h <= 0 or hk <= 0 or h % hk:
        raise SystemExit(f"KILN_ATTN_HEADS: {h} query heads over {hk} key heads (H must be a positive multiple of HK)")
    return h, hk


H, HK = _heads()  # query heads, key heads
D = 128  # head dim
BACKENDS = ("cudnn", "flash", "efficient")


SEQ_OPTIONS = (("--seqs", {"default": "4096,8192,16384"}), ("--tokens", {"type": int, "default": 16384}))


def parse_args(doc: str, options=SEQ_OPTIONS):
    """The command line (--kiln, --out, --samples, --tune-timeout, and each (flag, argparse keywords) of `options`:
    by default --seqs and --tokens); OUT made. Returns (args, OUT)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    for flag, kwargs in options:
        ap.add_argument(flag, **kwargs)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--tune-timeout", type=int, default=240)
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    return a, out


def results_header(method: list) -> dict:
    """The results file's header: the device, torch, the heads, the method's lines; rows appended by the caller."""
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "heads": [H, HK, D],
            "method": method, "rows": []}


def kiln_tune(kiln: str, spec_path, db, timeout: int, log_path) -> tuple:
    """`kiln tune SPEC --store DB`, its output written to log_path. Returns (exit code, wall seconds)."""
    t0 = time.time()
    r = subprocess.run([kiln, "tune", str(spec_path), "--store", str(db)], capture_output=True, text=True,
                       timeout=timeout)
    pathlib.Path(log_path).write_text(r.stdout + r.stderr)
    return r.returncode, round(time.time() - t0, 1)


def sdpa_step(backend: str, q, k, v, **kwargs):
    """F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs) under one SDPA backend, run once (so a
    backend that cannot take the call raises here); returns the step for timing."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    chosen = sdpa_backend(backend)

    def step():
        with sdpa_kernel([chosen]):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs)
    step()
    return step


def sdpa_backend(name: str):
    """torch.nn.attention.SDPBackend for "cudnn", "flash" or "efficient"."""
    from torch.nn.attention import SDPBackend
    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}[name]
