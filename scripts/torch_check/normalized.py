"""Kiln's normalized graph (docs/normalized-graph.md), as `kiln validate SPEC --normalized -` writes it.

Kiln parses, validates and infers the spec; this module only reads its answer into small objects: tensors
with dims, strides and dtype names, nodes in topological order with every attribute resolved, and per
output the tolerances Kiln's check_outputs gives it. Needs the standard library only (no torch).
"""

import json
import math
import subprocess

FORMAT = "kiln-normalized-graph"
VERSION = 1


# `kiln validate`'s exit codes that say the spec is refused (README's table): bad input, not supported.
REFUSAL_EXIT_CODES = {2: "bad input or usage", 5: "not supported"}


class NormalizedError(Exception):
    """kiln refused the spec (its message), or its document cannot be read. exit_code: kiln validate's
    when it exited non-zero, else None; refused: that exit code says the spec is refused (not a crash, not
    the environment)."""

    def __init__(self, message, exit_code=None):
        super().__init__(message)
        self.exit_code = exit_code
        self.refused = exit_code in REFUSAL_EXIT_CODES


class Tensor:
    def __init__(self, index, j):
        self.index = index
        self.name = j["name"]
        self.dims = list(j["dims"])
        self.elements = math.prod(self.dims)
        self.strides = list(j["strides"])
        self.layout = j["layout"]
        self.dtype = j["dtype"]  # a Kiln dtype name: fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int8, int32, int64
        self.is_input, self.is_output, self.is_virtual = j["input"], j["output"], j["virtual"]
        self.symbols = j.get("symbols")  # per dim: a dynamic dim's symbol, "~" (follows them) or None
        self.by_value = j["by_value"]
        self.value = j.get("value", 0.0)
        self.draw = (j["draw"]["lo"], j["draw"]["hi"]) if "draw" in j else None  # make_random_inputs' range


class Node:
    def __init__(self, j, index_of):
        self.name, self.op, self.kind, self.mode = j["name"], j["op"], j["kind"], j["mode"]
        self.compute_dtype = j["compute_dtype"]
        self.inputs = [index_of[i["tensor"]] for i in j["inputs"]]
        self.input_roles = [i["role"] for i in j["inputs"]]
        self.outputs = [index_of[o["tensor"]] for o in j["outputs"]]
        self.output = self.outputs[0]
        # An sdpa's softmax statistics and an sdpa_backward's gradients have no PyTorch path here yet: refused by
        # name rather than checked as something else (the GPU op coverage and python/tests/gpu check them).
        if len(self.outputs) > 1 or self.kind == "sdpa_backward":
            raise NormalizedError(f"node '{self.name}' ({self.op}): {len(self.outputs)} outputs"
                                  f"{' (an sdpa_backward)' if self.kind == 'sdpa_backward' else ''}: this checker "
                                  f"runs one-output nodes only; the softmax statistics, the backward pass and "
                                  f"sdpa_fp8 are checked by the GPU op coverage (and the first two by "
                                  f"python/tests/gpu)")
        self.attrs = j["attributes"]  # defaults filled in: conv padding/stride/dilation/groups, axes, ...
        self.reduction_length = j["reduction_length"]

    def label(self):
        return f"node '{self.name}' ({self.op})"


class Output:
    def __init__(self, j, index_of):
        self.tensor = index_of[j["tensor"]]
        self.reduction_length = j["reduction_length"]
        self.accumulation = j["accumulation"]
        self.tolerance = j["tolerance"]  # {"bound", "bound_tf32", "legacy", "legacy_tf32"}: check_outputs'

    def tolerance_for(self, bound, allow_tf32, scale):
        """check_outputs' tolerance for this output, CheckOptions::tolerance_scale applied."""
        tol = dict(self.tolerance[("bound" if bound else "legacy") + ("_tf32" if allow_tf32 else "")])
        for k in ("atol", "rtol", "acc_coeff"):
            tol[k] *= scale
        return tol


class Graph:
    """A validated Kiln graph: tensors in Graph::tensors order, nodes in topological order."""

    def __init__(self, doc):
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise NormalizedError(f"not a normalized graph (format {doc.get('format') if isinstance(doc, dict) else doc!r})")
        if doc.get("version") != VERSION:
            raise NormalizedError(f"normalized graph version {doc.get('version')}, this checker reads {VERSION}")
        try:
            self.name = doc["name"]
            self.dynamic = doc["dynamic"]
            self.tensors = [Tensor(i, t) for i, t in enumerate(doc["tensors"])]
            index_of = {t.name: t.index for t in self.tensors}
            self.nodes = [Node(n, index_of) for n in doc["nodes"]]
            self.outputs = [Output(o, index_of) for o in doc["outputs"]]
        except (KeyError, TypeError) as e:
            raise NormalizedError(f"malformed normalized graph: {type(e).__name__}: {e}") from None

    def output_tensors(self):
        return [self.tensors[o.tensor] for o in self.outputs]

    def drawn_inputs(self):
        """The graph inputs the checker draws (every one not passed by value), in tensor order."""
        return [t for t in self.tensors if t.is_input and not t.by_value]


def last_line(text):
    lines = [s for s in text.strip().splitlines() if s.strip()]
    return lines[-1].strip() if lines else ""


def normalize(kiln, spec, timeout=120):
    """Runs `kiln validate SPEC --normalized -`: returns (Graph, the document's text); NormalizedError with
    kiln's own message and exit code for a spec it refuses."""
    try:
        p = subprocess.run([kiln, "validate", spec, "--normalized", "-"], capture_output=True, text=True,
                           timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        raise NormalizedError(f"kiln validate: {e}") from None
    if p.returncode != 0:
        raise NormalizedError(last_line(p.stderr) or f"kiln validate exited {p.returncode}",
                              p.returncode if p.returncode > 0 else None)
    try:
        doc = json.loads(p.stdout)
    except ValueError as e:
        raise NormalizedError(f"kiln validate --normalized: not JSON: {e}") from None
    return Graph(doc), p.stdout
