"""The GPU suite of Kiln's Python package: real PyTorch on a real GPU (docs/python.md "Tests"). Every test here is
marked `gpu` and skipped where torch with CUDA is missing; KILN_EXPECT_GPU=1 (the GPU machine's runner) turns that
skip into a failure, so a broken CUDA set-up cannot pass as "skipped"."""
from __future__ import annotations

import os

import pytest

try:
    import torch

    HAVE_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover - the host has no torch
    torch = None
    HAVE_CUDA = False


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
            if not HAVE_CUDA:
                if os.environ.get("KILN_EXPECT_GPU") == "1":
                    item.add_marker(pytest.mark.xfail(reason="KILN_EXPECT_GPU=1 but torch sees no GPU", strict=True,
                                                      run=False))
                else:
                    item.add_marker(pytest.mark.skip(reason="needs torch with CUDA"))
