"""Loads the cuDNN that PyTorch's wheels install (site-packages/nvidia/cudnn) before Kiln's extension, when it is
there: the extension then binds to that library (the one torch uses too), never to an older system copy that the
loader would otherwise find first. KILN_CUDNN_PRELOAD=0 turns this off (the loader's search decides)."""
from __future__ import annotations

import ctypes
import os


def load_cudnn() -> str | None:
    """The path of the libcudnn.so.9 loaded, or None when none was preloaded."""
    if os.environ.get("KILN_CUDNN_PRELOAD", "1") == "0":
        return None
    try:
        import nvidia.cudnn as cudnn_pkg  # type: ignore[import-not-found]
    except ImportError:
        return None
    for folder in list(getattr(cudnn_pkg, "__path__", [])):
        lib = os.path.join(folder, "lib", "libcudnn.so.9")
        if os.path.exists(lib):
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
            return lib
    return None
