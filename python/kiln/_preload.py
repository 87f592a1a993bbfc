"""Loads the cuDNN and cuBLASLt that PyTorch's wheels install (site-packages/nvidia/cudnn, nvidia/cublas or
nvidia/cu13) before Kiln's extension, when they are there: the extension then binds to those libraries (the ones
torch uses too), never to an older system copy that the loader would otherwise find first, and needs no CUDA toolkit
for cuBLASLt. KILN_CUDNN_PRELOAD=0 turns this off (the loader's search decides)."""
from __future__ import annotations

import ctypes
import importlib
import os


def _load_from(packages: tuple[str, ...], library: str) -> str | None:
    """Loads `library` from the first of `packages` (namespace packages of PyTorch's wheels) whose lib/ has it."""
    if os.environ.get("KILN_CUDNN_PRELOAD", "1") == "0":
        return None
    for name in packages:
        try:
            pkg = importlib.import_module(name)
        except ImportError:
            continue
        for folder in list(getattr(pkg, "__path__", [])):
            lib = os.path.join(folder, "lib", library)
            if os.path.exists(lib):
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                return lib
    return None


def load_cudnn() -> str | None:
    """The path of the libcudnn.so.9 loaded, or None when none was preloaded."""
    return _load_from(("nvidia.cudnn",), "libcudnn.so.9")


def load_cublaslt() -> str | None:
    """The path of the libcublasLt.so.13 loaded, or None when none was preloaded."""
    return _load_from(("nvidia.cublas", "nvidia.cu13"), "libcublasLt.so.13")
