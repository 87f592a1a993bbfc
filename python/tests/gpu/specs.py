"""Specs the GPU suite shares."""
from __future__ import annotations


def mlp_up_spec(name: str, d: int = 256, h: int = 512, tokens: int = 64, dtype: str = "bf16") -> dict:
    """matmul + bias + GELU over a dynamic token count: an MLP's up-projection."""
    return {
        "name": name, "io_dtype": dtype, "intermediate_dtype": "fp32", "compute_dtype": "fp32",
        "dynamic": {"tokens": tokens},
        "tensors": {"x": {"dims": [1, "tokens", d]}, "w": {"dims": [1, d, h]}, "bias": {"dims": [1, 1, h]}},
        "nodes": [
            {"name": "mm", "op": "matmul", "inputs": ["x", "w"], "outputs": ["mm_out"]},
            {"name": "add_bias", "op": "bias_add", "inputs": ["mm_out", "bias"], "outputs": ["biased"]},
            {"name": "gelu", "op": "gelu_erf", "inputs": ["biased"], "outputs": ["y"]},
        ],
        "outputs": ["y"],
    }
