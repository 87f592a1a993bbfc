"""Graphs from specs: every way in, signatures against the CLI's, reshaping, and the errors a user meets."""
from __future__ import annotations

import json
import pathlib
import subprocess

import pytest

import kiln

EXAMPLES = sorted((pathlib.Path(__file__).resolve().parents[2] / "examples").glob("*.json")) + sorted(
    (pathlib.Path(__file__).resolve().parents[2] / "examples" / "small").glob("*.json"))


def test_every_way_in_gives_one_graph(root, spec_dict, tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(spec_dict))
    graphs = [kiln.load(spec_dict), kiln.load(json.dumps(spec_dict)), kiln.load(str(path)), kiln.load(path)]
    assert {g.structure for g in graphs} == {graphs[0].structure}
    assert {g.shape_key for g in graphs} == {"batch=4"}
    assert kiln.load(graphs[0]) is graphs[0]


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_signature_matches_the_cli(spec, kiln_cli):
    out = subprocess.run([kiln_cli, "signature", "--json", str(spec)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cli = json.loads(out.stdout)
    cli = cli[0] if isinstance(cli, list) else cli
    sig = kiln.signature(spec)
    assert sig.structure == cli["structure"]
    assert sig.shape_key == cli["shape_key"]


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_to_json_reads_back_to_the_same_signature(spec):
    g = kiln.load(spec)
    again = kiln.load(g.to_json())
    assert (again.structure, again.shape_key) == (g.structure, g.shape_key)
    assert json.loads(g.to_json(indent=2))["name"] == g.name


def test_inputs_outputs_and_tensors(spec_dict):
    g = kiln.load(spec_dict)
    assert [t["name"] for t in g.inputs] == ["a", "b", "bias"]
    assert [t["name"] for t in g.outputs] == ["y"]
    y = g.tensor("y")
    assert y["shape"] == [4, 64, 48] and y["dtype"] == "fp16" and y["symbols"] == ["batch", None, None]
    assert y["strides"] == [64 * 48, 48, 1]
    assert g.dynamic == {"batch": 4}


def test_at_rederives_every_extent(spec_dict):
    g = kiln.load(spec_dict)
    g9 = g.at({"batch": 9})
    assert g9.structure == g.structure and g9.shape_key == "batch=9"
    assert g9.tensor("y")["shape"] == [9, 64, 48]
    assert g9.tensor("a")["shape"] == [9, 64, 32]


def test_at_refuses_unknown_symbols_and_bad_values(spec_dict):
    g = kiln.load(spec_dict)
    with pytest.raises(kiln.BadInput, match="seq"):
        g.at({"seq": 3})
    with pytest.raises(kiln.BadInput):
        g.at({"batch": 0})


def test_missing_file_is_not_found(tmp_path):
    with pytest.raises(kiln.NotFound) as e:
        kiln.load(str(tmp_path / "nope.json"))
    assert e.value.exit_code == 2 and "nope.json" in e.value.message


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["nodes"][0].update(inputs=["a", "zz"]), "zz"),
    (lambda d: d["tensors"]["b"].update(dims=[1, 31, 48]), "mm"),
    (lambda d: d["nodes"][2].update(op="gelu_fast"), "gelu_fast"),
    (lambda d: d["tensors"]["a"].update(dims=["batch", 64, -1]), "'a'"),
    (lambda d: d.pop("outputs"), "outputs"),
    (lambda d: d.update(io_dtype="fp12"), "fp12"),
])
def test_bad_specs_name_what_is_wrong(spec_dict, mutate, needle):
    mutate(spec_dict)
    with pytest.raises(kiln.BadInput) as e:
        kiln.load(spec_dict)
    assert needle in e.value.message and e.value.message.startswith("<dict>")


def test_malformed_json_text_names_the_place():
    with pytest.raises(kiln.BadInput) as e:
        kiln.load('{"name": "x", "tensors": {,}}')
    assert "line 1" in e.value.message or "column" in e.value.message


@pytest.mark.parametrize("bad", [42, None, [1, 2], {"name": object()}])
def test_what_is_not_a_spec_is_refused(bad):
    with pytest.raises(kiln.BadInput):
        kiln.load(bad)


def test_validate_for_an_older_target(root):
    with pytest.raises(kiln.KilnError) as e:
        kiln.validate(root / "examples" / "sdpa_fwd.json", target_sm=70)
    assert e.value.code == "NotSupported"


def test_indent_over_the_limit_is_refused(spec_dict):
    g = kiln.load(spec_dict)
    assert json.loads(g.to_json(64))["name"] == "mm_gelu"
    for indent in (65, 1025, 100000):
        with pytest.raises(kiln.BadInput, match="indent"):
            g.to_json(indent)


def test_nul_bytes_are_refused(root, spec_dict):
    path = str(root / "examples" / "small" / "conv_bias_relu.json")
    with pytest.raises(kiln.BadInput, match="NUL"):
        kiln.load(path + "\x00junk")
    with pytest.raises(kiln.BadInput, match="NUL byte at byte"):
        kiln.load(json.dumps(spec_dict) + "\x00junk")


def test_long_non_ascii_names_in_errors_are_readable(spec_dict):
    spec_dict["nodes"][0]["inputs"] = ["a", "b" + "\U0001F525" * 100]
    with pytest.raises(kiln.BadInput) as e:
        kiln.load(spec_dict)
    assert isinstance(e.value.message, str)


@pytest.mark.parametrize("sm,needle", [(5, "ambiguous"), (-1, "SM version"), (1001, "SM version")])
def test_target_sm_is_read_as_the_cli_reads_it(root, sm, needle):
    with pytest.raises(kiln.BadInput, match=needle):
        kiln.validate(root / "examples" / "small" / "conv_bias_relu.json", target_sm=sm)


def test_validate_checks_a_graph_again_for_a_target(root):
    g = kiln.load(root / "examples" / "sdpa_fwd.json")
    assert kiln.validate(g) is g
    with pytest.raises(kiln.NotSupported):
        kiln.validate(g, target_sm=75)


def test_at_keeps_the_dims_left_out():
    spec = {
        "name": "two_dims", "io_dtype": "fp16", "dynamic": {"b": 2, "m": 8},
        "tensors": {"x": {"dims": ["b", "m", 16]}},
        "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"],
    }
    g = kiln.load(spec)
    assert g.at({"m": 3}).shape_key == "b=2,m=3"
    assert g.at({"m": 3}).tensor("y")["shape"] == [2, 3, 16]


def test_mappings_numpy_ints_and_a_bom_are_read(spec_dict):
    import types

    np = pytest.importorskip("numpy")

    spec_dict["tensors"]["b"]["dims"] = [np.int64(1), np.int32(32), 48]
    proxy = types.MappingProxyType(spec_dict)
    assert kiln.load(proxy).structure == kiln.load(json.loads(json.dumps(spec_dict, default=int))).structure
    assert kiln.load("\ufeff  " + json.dumps(spec_dict, default=int)).name == "mm_gelu"


def test_user_made_errors_carry_their_class_code():
    e = kiln.BadInput("x")
    assert (e.code, e.exit_code) == ("InvalidArgument", 2)
    assert (kiln.Unavailable("y").code, kiln.Unavailable("y").exit_code) == ("Unavailable", 3)
    assert kiln.KilnError("z").exit_code == 10


def test_dropout_takes_a_seed_and_an_offset_and_its_limits_are_named(root):
    """Attention with dropout (docs/spec.md "dropout"): the seed and offset are int64 graph inputs, last; the fake
    kernel's output is o's; a sliding window is past cuDNN's limits (NotSupported), a missing seed bad input."""
    import json

    from kiln._meta import output_meta

    spec = json.loads((root / "examples" / "sdpa_dropout.json").read_text())
    g = kiln.load(spec)
    assert [t["name"] for t in g.inputs] == ["q", "k", "v", "seed", "offset"]
    assert [g.tensor(n)["dtype"] for n in ("seed", "offset")] == ["int64", "int64"]
    (shape, _, dtype), = output_meta(g, [t["shape"] for t in g.inputs])
    assert shape == [4, 16, 2048, 128] and dtype == "bf16"
    other = json.loads(json.dumps(spec))
    other["nodes"][0]["dropout"] = 0.2
    assert kiln.load(other).structure != g.structure
    window = json.loads(json.dumps(spec))
    window["nodes"][0]["left_bound"] = 64
    with pytest.raises(kiln.NotSupported, match="no sliding window"):
        kiln.validate(window)
    unseeded = json.loads(json.dumps(spec))
    unseeded["nodes"][0]["inputs"] = ["q", "k", "v"]
    with pytest.raises(kiln.BadInput, match="dropout's seed and offset"):
        kiln.load(unseeded)
