"""The fake kernel's shape logic (kiln/_meta.py) on concrete and on symbolic sizes, checked against the graph's own
shape inference (kiln.Graph.at): what torch.compile's fake tensors will see."""
from __future__ import annotations

import itertools

import pytest

import kiln
from kiln._meta import dense_strides, output_meta


class Sym:
    """A stand-in for torch.SymInt: arithmetic builds an expression; int() concretizes (and is recorded)."""

    concretized: list = []

    def __init__(self, name, value):
        self.name, self.value = name, value

    def __mul__(self, other):
        o = other.value if isinstance(other, Sym) else other
        return Sym(f"({self.name}*{getattr(other, 'name', other)})", self.value * o)

    __rmul__ = __mul__

    def __int__(self):
        Sym.concretized.append(self.name)
        return self.value

    def __eq__(self, other):
        return isinstance(other, Sym) and self.name == other.name


def test_dense_strides_follow_the_layout():
    assert dense_strides([2, 3, 4], [12, 4, 1]) == [12, 4, 1]
    assert dense_strides([2, 16, 8, 8], [1024, 1, 128, 16]) == [1024, 1, 128, 16]  # NHWC


@pytest.mark.parametrize("batch", [1, 3, 17])
def test_concrete_sizes_match_the_graphs_inference(spec_dict, batch):
    g = kiln.load(spec_dict)
    shapes = [[batch if s == "batch" else v for s, v in zip(t["symbols"], t["shape"])] for t in g.inputs]
    (shape, strides, dtype), = output_meta(g, shapes)
    want = g.at({"batch": batch}).tensor("y")
    assert (shape, strides, dtype) == (want["shape"], want["strides"], want["dtype"])


def test_a_symbolic_batch_passes_through_without_concretizing(spec_dict):
    g = kiln.load(spec_dict)
    b = Sym("s0", 5)
    Sym.concretized = []
    (shape, strides, _), = output_meta(g, [[b, 64, 32], [1, 32, 48], [1, 1, 48]])
    assert shape[0] is b and shape[1:] == [64, 48]
    assert strides[1:] == [48, 1] and isinstance(strides[0], int) and strides[0] == 64 * 48
    assert Sym.concretized == []


def test_conv_with_dynamic_spatial_dims_concretizes_only_the_derived_ones(root):
    spec = {
        "name": "conv_dyn_hw", "io_dtype": "fp16", "dynamic": {"n": 2, "h": 9, "w": 7},
        "tensors": {"x": {"dims": ["n", 8, "h", "w"], "layout": "NHWC"}, "w": {"dims": [16, 8, 3, 3], "layout": "NHWC"},
                    "y": {"layout": "NHWC"}},
        "nodes": [{"name": "conv", "op": "conv_fprop", "inputs": ["x", "w"], "outputs": ["y"],
                   "padding": [0, 0], "stride": [2, 2], "dilation": [1, 1]}],
        "outputs": ["y"],
    }
    g = kiln.load(spec)
    for n, h, w in itertools.product([1, 4], [9, 16], [7, 33]):
        Sym.concretized = []
        (shape, strides, _), = output_meta(g, [[Sym("n", n), 8, Sym("h", h), Sym("w", w)], [16, 8, 3, 3]])
        concretized = list(Sym.concretized)
        want = g.at({"n": n, "h": h, "w": w}).tensor("y")
        assert shape[0].value == n and shape[0].name == "n"  # the batch stays symbolic
        assert shape[1] == 16 and shape[2:] == want["shape"][2:]  # the derived extents, from the graph
        assert [s.value if isinstance(s, Sym) else s for s in strides] == want["strides"]
        assert sorted(concretized) == ["h", "n", "w"]  # graph.at() needs every symbol's value, once each
