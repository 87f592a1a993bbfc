"""Output shapes and strides of a graph from its inputs' shapes, for kiln.torch's fake (meta) kernels.

Pure Python over the graph's tensor descriptions (kiln.Graph.inputs / .outputs), so that it runs on symbolic
sizes (torch.SymInt under torch.compile's dynamic shapes) and is tested on a machine without torch:
  - an output dim that is a dynamic dim ("batch") is the input's size at the first place that dim appears:
    symbolic sizes pass through untouched, so a compiled graph stays dynamic in it;
  - a static dim is its value;
  - a derived dim (a convolution's output extent over a dynamic input extent: "~") needs the graph's own
    shape inference, run on concrete values (`concrete(size)`, which under torch.compile specializes on them).
Strides follow the order of the graph's strides (row-major, NHWC, ...), recomputed from the sizes, so a dynamic
output gets the dense strides its layout has at any size; a tensor with no dynamic dim keeps the graph's exactly.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence


def symbol_places(inputs: Sequence[dict]) -> dict[str, tuple[int, int]]:
    """Each dynamic dim's first (input position, axis)."""
    places: dict[str, tuple[int, int]] = {}
    for i, t in enumerate(inputs):
        for axis, sym in enumerate(t["symbols"]):
            if sym not in (None, "~") and sym not in places:
                places[sym] = (i, axis)
    return places


def dense_strides(shape: Sequence[Any], like_strides: Sequence[int]) -> list[Any]:
    """Dense strides for `shape` in the order `like_strides` has (largest stride outermost; ties keep the
    outer axis outer)."""
    order = sorted(range(len(shape)), key=lambda a: (-like_strides[a], a))  # outermost first
    strides: list[Any] = [0] * len(shape)
    step: Any = 1
    for a in reversed(order):
        strides[a] = step
        step = step * shape[a]
    return strides


def output_meta(graph: Any, input_shapes: Sequence[Sequence[Any]],
                concrete: Callable[[Any], int] = int) -> list[tuple[list[Any], list[Any], str]]:
    """(shape, strides, kiln dtype name) of each output of `graph` (a kiln.Graph) for inputs of these shapes.

    The dynamic dims are read from the inputs; a derived dim asks graph.at() with concrete values. Inputs whose
    rank differs from the graph's are left to the real kernel to refuse (it names the tensor)."""
    inputs, outputs = graph.inputs, graph.outputs
    places = symbol_places(inputs)
    sizes = {sym: input_shapes[i][axis] for sym, (i, axis) in places.items()}
    reshaped = None
    result = []
    for out in outputs:
        shape: list[Any] = []
        for axis, sym in enumerate(out["symbols"]):
            if sym is None:
                shape.append(out["shape"][axis])
            elif sym != "~":
                shape.append(sizes[sym])
            else:
                if reshaped is None:
                    reshaped = graph.at({s: concrete(v) for s, v in sizes.items()}) if sizes else graph
                shape.append(reshaped.tensor(out["name"])["shape"][axis])
        fixed = all(s is None for s in out["symbols"])
        strides = list(out["strides"]) if fixed else dense_strides(shape, out["strides"])
        result.append((shape, strides, out["dtype"]))
    return result
