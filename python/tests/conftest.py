"""Host tests of Kiln's Python package (docs/python.md "Tests"). They import the package from
$KILN_PYTHONPATH-style setups: scripts/test.sh runs them with PYTHONPATH=<build>/python; after `pip install .`
they run against the installed package. KILN_CLI names the `kiln` binary the differential tests compare with
(default <build>/kiln beside the package, else `kiln` on PATH); those tests skip when there is none."""
from __future__ import annotations

import os
import pathlib
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def root() -> pathlib.Path:
    return ROOT


@pytest.fixture(scope="session")
def kiln_cli() -> str:
    cli = os.environ.get("KILN_CLI")
    if cli:
        return cli
    import kiln

    pkg = pathlib.Path(kiln.__file__).resolve().parent
    for candidate in (pkg.parent.parent / "kiln", ROOT / "build" / "kiln"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("kiln")
    if not found:
        pytest.skip("no kiln CLI to compare with (set KILN_CLI)")
    return found


@pytest.fixture
def spec_dict() -> dict:
    return {
        "name": "mm_gelu",
        "io_dtype": "fp16",
        "dynamic": {"batch": 4},
        "tensors": {"a": {"dims": ["batch", 64, 32]}, "b": {"dims": [1, 32, 48]}, "bias": {"dims": [1, 1, 48]}},
        "nodes": [
            {"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["mm_out"]},
            {"name": "add", "op": "bias_add", "inputs": ["mm_out", "bias"], "outputs": ["biased"]},
            {"name": "gelu", "op": "gelu_erf", "inputs": ["biased"], "outputs": ["y"]},
        ],
        "outputs": ["y"],
    }
