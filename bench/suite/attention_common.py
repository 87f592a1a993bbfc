"""What bench/attention_backward.py and bench/attention_fp8.py share: Llama-3.1-8B's attention heads, their command
line, the results' header, and PyTorch's SDPA backends by name."""
from __future__ import annotations

import argparse
import pathlib

import torch

H, HK, D = 32, 8, 128  # query heads, key heads, head dim
BACKENDS = ("cudnn", "flash", "efficient")


def parse_args(doc: str):
    """The command line (--kiln, --out, --seqs, --tokens, --samples, --tune-timeout); OUT made. Returns (args, OUT)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seqs", default="4096,8192,16384")
    ap.add_argument("--tokens", type=int, default=16384)
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


def sdpa_backend(name: str):
    """torch.nn.attention.SDPBackend for "cudnn", "flash" or "efficient"."""
    from torch.nn.attention import SDPBackend
    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}[name]
