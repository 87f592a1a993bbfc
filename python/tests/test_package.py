"""The package itself: its version, its public names, its stubs, and errors as exception classes."""
from __future__ import annotations

import pathlib
import re

import pytest

import kiln
from kiln import _kiln


def test_version_is_the_projects(root):
    cmake = (root / "CMakeLists.txt").read_text()
    want = re.search(r"project\(kiln VERSION ([0-9.]+)", cmake).group(1)
    assert kiln.__version__ == want


def test_public_names_exist():
    for name in kiln.__all__:
        assert hasattr(kiln, name), name


def test_stubs_and_marker_are_shipped():
    pkg = pathlib.Path(kiln.__file__).parent
    stub = (pkg / "_kiln.pyi").read_text()
    assert "class Graph" in stub and "class Planner" in stub and "def tune(" in stub
    assert (pkg / "py.typed").exists()


# Each status code, the class it raises and the exit code the CLI gives it (include/kiln/core/exit_codes.h).
CODES = [
    ("InvalidArgument", kiln.BadInput, 2),
    ("NotFound", kiln.NotFound, 2),
    ("Corruption", kiln.Corruption, 4),
    ("NotSupported", kiln.NotSupported, 5),
    ("Unavailable", kiln.Unavailable, 3),
    ("FailedPrecondition", kiln.NoPlan, 6),
    ("CheckFailed", kiln.CheckFailed, 1),
    ("Cancelled", kiln.Cancelled, 130),
    ("NewerVersion", kiln.NewerVersion, 7),
    ("Internal", kiln.InternalError, 10),
]


@pytest.mark.parametrize("code,cls,exit_code", CODES)
def test_status_codes_become_their_exception(code, cls, exit_code):
    with pytest.raises(cls) as e:
        _kiln._raise_status(code, "what went wrong")
    assert type(e.value) is cls
    assert e.value.code == code and e.value.exit_code == exit_code
    assert e.value.message == "what went wrong"
    assert str(e.value) == f"{code}: what went wrong"
    assert isinstance(e.value, kiln.KilnError)


def test_bad_input_is_also_a_value_error():
    with pytest.raises(ValueError):
        _kiln._raise_status("InvalidArgument", "x")
    with pytest.raises(LookupError):
        _kiln._raise_status("NotFound", "x")


def test_planner_without_a_gpu_says_so():
    try:
        import torch  # noqa: F401

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    except ImportError:
        pass
    with pytest.raises(kiln.Unavailable) as e:
        kiln.Planner()
    assert e.value.exit_code == 3
    assert "needs a GPU" in e.value.message


@pytest.mark.parametrize("kwargs,needle", [
    ({"preset": "fast"}, "preset: unknown value 'fast'"),
    ({"new_shapes": "later"}, "new_shapes: unknown value 'later'"),
    ({"first_use": "sometimes"}, "first_use: unknown value 'sometimes'"),
    ({"buckets": "batch=cubes"}, "cubes"),
    ({"policy": "hope"}, "hope"),
    ({"promote_by": "bogus"}, "promote_by: unknown value 'bogus'"),
    ({"handles": -1}, "handles: -1"),
    ({"shadow_every": -5}, "shadow_every: -5"),
    ({"shadow_every": 2**40}, "shadow_every: 1099511627776, 0 to 2147483647"),
    ({"store": "a.db", "mirror": "/tmp/m.db"}, "mirror: only a server store"),
])
def test_planner_options_are_checked_before_the_gpu(kwargs, needle):
    with pytest.raises(kiln.BadInput) as e:
        kiln.Planner(**kwargs)
    assert needle in e.value.message


@pytest.mark.parametrize("value", ["3", b"3", 1.5, True])
def test_shadow_every_takes_an_int_only(value):
    with pytest.raises(TypeError, match="shadow_every"):
        kiln.Planner(shadow_every=value)


_EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def test_preload_takes_a_list_of_graphs_checked_before_the_gpu(tmp_path):
    # One spec where a list is meant: refused by name (a str would otherwise be read as its characters).
    with pytest.raises(kiln.BadInput, match="preload: a list of graphs or specs, not one"):
        kiln.Planner(preload=str(_EXAMPLES / "conv_bias_relu.json"))
    with pytest.raises(kiln.NotFound):
        kiln.Planner(preload=[str(tmp_path / "absent.json")])
    with pytest.raises(kiln.BadInput):
        kiln.Planner(preload=[{"name": "g", "nodes": []}])
    try:
        import torch  # noqa: F401

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    except ImportError:
        pass
    # Valid graphs (a spec and a Graph) reach the C++ Planner, which needs a GPU.
    with pytest.raises(kiln.Unavailable):
        kiln.Planner(preload=[str(_EXAMPLES / "conv_bias_relu.json"),
                              kiln.load(str(_EXAMPLES / "rms_norm.json"))], preload_warm=False)


def test_preload_items_are_named_by_position():
    with pytest.raises(kiln.BadInput, match=r"preload\[1\]: None is not a graph"):
        kiln.Planner(preload=[str(_EXAMPLES / "rms_norm.json"), None])
    with pytest.raises(kiln.NotFound, match=r"preload\[0\]: ") as e:
        kiln.Planner(preload=["/nonexistent/spec.json"])
    assert e.value.exit_code == 2 and e.value.code == "NotFound"
    with pytest.raises(TypeError, match="preload_warm: a bool expected"):
        kiln.Planner(preload=[str(_EXAMPLES / "rms_norm.json")], preload_warm="no")
    with pytest.raises(kiln.BadInput, match="not one"):
        kiln.Planner(preload=bytearray(b"x"))
