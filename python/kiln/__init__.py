"""Kiln: tuned, verified cuDNN plans, served from a store (docs/python.md).

    import kiln
    g = kiln.load("model/conv.json")                 # a spec file, a dict, JSON text, or a kiln.Graph
    planner = kiln.Planner(store="plans.db")
    plan = planner.obtain(g, batch=24)               # plan.source, plan.why, plan.config, plan.workspace_bytes
    plan(x=x, w=w, y=y)                              # CUDA tensors: torch, CuPy, JAX (DLPack) ...

``kiln.torch.op(spec, store=...)`` makes a torch custom op of a graph (torch.compile and CUDA graphs accept it).
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, NamedTuple, Sequence, Union

from . import _preload

_preload.load_cudnn()
_preload.load_cublaslt()

from . import _kiln  # noqa: E402
from .errors import (  # noqa: E402,F401
    BY_CODE as _BY_CODE,
    BadInput,
    Cancelled,
    CheckFailed,
    Corruption,
    InternalError,
    KilnError,
    NewerVersion,
    NoPlan,
    NotFound,
    NotSupported,
    Unavailable,
)

_kiln._set_error_classes(_BY_CODE, KilnError)

__version__: str = _kiln.__version__

Graph = _kiln.Graph
PreparedGraph = _kiln.PreparedGraph
Plan = _kiln.Plan
SpecLike = Union[str, "os.PathLike[str]", Mapping[str, Any], "_kiln.Graph"]


def _jsonable(o: Any) -> Any:
    """json.dumps' fallback: any Mapping as a dict, any integer-like (numpy's) as an int, any sequence as a list."""
    if isinstance(o, Mapping):
        return dict(o)
    if hasattr(o, "__index__"):
        return o.__index__()
    if isinstance(o, (tuple, list)) or (hasattr(o, "__iter__") and not isinstance(o, (str, bytes))):
        return list(o)
    raise TypeError(f"{type(o).__name__} is not JSON-serializable")


def load(spec: SpecLike, *, target_sm: int = 0) -> "_kiln.Graph":
    """A validated graph from a spec: a path (str or PathLike) to a JSON file, a dict (any Mapping), JSON text (a str
    starting with '{', after any whitespace or byte-order mark), or a Graph (checked again only when target_sm is
    given). BadInput naming the node, tensor or attribute at fault; NotFound for a file that is not there."""
    if isinstance(spec, _kiln.Graph):
        return spec if not target_sm else _kiln.Graph.from_json(spec.to_json(), spec.name, target_sm)
    if isinstance(spec, Mapping):
        try:
            text = json.dumps(dict(spec), default=_jsonable, allow_nan=True)
        except (TypeError, ValueError) as e:
            raise BadInput(f"<dict>: not JSON-serializable: {e}") from None
        return _kiln.Graph.from_json(text, "<dict>", target_sm)
    if isinstance(spec, os.PathLike):
        return _kiln.Graph.from_file(os.fspath(spec), target_sm)
    if isinstance(spec, str):
        stripped = spec.lstrip("\ufeff \t\r\n")
        if stripped.startswith("{"):
            return _kiln.Graph.from_json(stripped, "<string>", target_sm)
        return _kiln.Graph.from_file(spec, target_sm)
    raise BadInput(f"a spec is a path, a dict, JSON text or a kiln.Graph, not a {type(spec).__name__}")


def validate(spec: SpecLike, *, target_sm: int = 0) -> "_kiln.Graph":
    """load(), named for what it checks: returns the validated graph or raises BadInput."""
    return load(spec, target_sm=target_sm)


class Signature(NamedTuple):
    structure: str  # 32 hex digits: what plans are stored under
    shape_key: str  # "batch=8": the dynamic dims' values; "" when nothing is dynamic


def signature(spec: SpecLike) -> Signature:
    """The graph's structure signature and shape key (the same as `kiln signature`)."""
    g = load(spec)
    return Signature(g.structure, g.shape_key)


class Planner:
    """kiln::Planner: plans for graphs at shapes, from the cheapest source (docs/runtime.md "Sources").

    store: a SQLite file or a postgresql:// location (None: no store). preset: "serving" (a service: stopgaps for
    new shapes, promoted in the background), "tools" or "offline" (tuning). buckets: "batch=pow2;*=exact".
    policy: what a stale stored plan does ("heuristics-and-queue", "retune", "fail"). new_shapes: "stopgap" or
    "build_now". first_use: "verify" or "off". shadow_every: one request in this many also runs the key's plan in
    shadow, if the store holds one (docs/rollout.md "Shadow sampling"; default 100, 0: never). preload: the graphs
    (specs or Graphs) whose stored plans the Planner starts loading as it is made, on threads of its own, each run
    once before any call gets it unless preload_warm is False; an obtain() of one of them waits for its load
    (docs/runtime.md "Loading at create"); wait_for_preload() says what was loaded. Needs a GPU: Unavailable on a
    machine without one.
    """

    def __init__(self, store: str | os.PathLike[str] | None = None, *, preset: str = "serving",
                 buckets: str | None = None, policy: str | None = None, new_shapes: str | None = None,
                 promote: bool | None = None, promote_by: str = "build", first_use: str | None = None,
                 writable: bool | None = None, mirror: str | None = None, handles: int = 0,
                 shadow_every: int | None = None, preload: Sequence[SpecLike] = (), preload_warm: bool = True):
        if preload is None:
            preload = ()
        if isinstance(preload, (str, bytes, bytearray, memoryview, os.PathLike, Mapping, _kiln.Graph)):
            raise BadInput("preload: a list of graphs or specs, not one (write preload=[spec])")
        graphs = []
        for i, g in enumerate(preload):
            if g is None:
                raise BadInput(f"preload[{i}]: None is not a graph or a spec")
            try:
                graphs.append(load(g))
            except KilnError as e:
                raise type(e)(f"preload[{i}]: {e.message}", e.code, e.exit_code) from None
        if not isinstance(preload_warm, bool):
            raise TypeError(f"preload_warm: a bool expected, got a {type(preload_warm).__name__}")
        self._p = _kiln.Planner(None if store is None else os.fspath(store), preset, writable, policy, buckets,
                                new_shapes, promote, promote_by, first_use, mirror, handles, shadow_every, graphs,
                                preload_warm)

    def prepare(self, graph: SpecLike) -> "_kiln.PreparedGraph":
        """Validates the graph and computes its signature once: obtain() on the result does no hashing."""
        return self._p.prepare(load(graph))

    def obtain(self, graph: SpecLike | "_kiln.PreparedGraph", shape: Mapping[str, int] | None = None,
               **dims: int) -> "_kiln.Plan":
        """A plan for the graph at `shape` (or dims as keywords; neither: the graph's own values)."""
        values = dict(shape or {})
        values.update(dims)
        prepared = graph if isinstance(graph, _kiln.PreparedGraph) else self.prepare(graph)
        return self._p.obtain(prepared, values)

    def preload(self, graph: SpecLike | "_kiln.PreparedGraph", warm: bool = False) -> dict:
        """Loads every stored plan of the graph's structure into memory (what a service does at start)."""
        prepared = graph if isinstance(graph, _kiln.PreparedGraph) else self.prepare(graph)
        return self._p.preload(prepared, warm)

    def wait_for_preload(self) -> dict:
        """Waits for the loads of the graphs given as preload= and says what they loaded: {"loaded", "warmed",
        "failed", "last_failure", "ms"} (all zero when none were given)."""
        return self._p.wait_for_preload()

    def wait_for_promotions(self) -> None:
        self._p.wait_for_promotions()

    def stats(self) -> dict:
        return self._p.stats()


def tune(spec: SpecLike, store: str | os.PathLike[str] | None = None, *, time_budget_s: float = 0.0,
         unfused: bool = True, shape: Mapping[str, int] | None = None, build_helpers: int | None = None) -> list[dict]:
    """Tunes the graph (or its fused segments, where cuDNN cannot fuse it whole) like `kiln tune`: every engine
    configuration built, checked against a reference and timed; the unfused alternative timed; the winner stored
    in `store` (default: the default store, $KILN_STORE or ~/.cache/kiln/plans.db). One dict per graph tuned.
    `build_helpers`: processes that build runtime-compiled candidates beside this one (cuDNN compiles one at a time
    per process); None: as `kiln tune` (half the hardware threads, at most 6, none below 4); 0: none."""
    g = load(spec)
    if shape:
        g = g.at(dict(shape))
    if build_helpers is not None and (isinstance(build_helpers, bool) or not isinstance(build_helpers, int)
                                      or not 0 <= build_helpers <= 64):
        raise BadInput(f"build_helpers: a number of processes in 0..64 or None, got {build_helpers!r}")
    location = os.fspath(store) if store is not None else _kiln.default_store_path()
    p = _kiln.Planner(location, "offline", True, None, None, None, None, "build", None, None, 0, None)
    from . import _build_helper

    helper = _build_helper.command()
    return _kiln.tune(p.prepare(g), time_budget_s, True, unfused, helper[0], helper[1:],
                      -1 if build_helpers is None else build_helpers)


def compile(spec: SpecLike, target: str | os.PathLike[str], store: str | os.PathLike[str] | None = None) -> list[dict]:  # noqa: A001
    """`kiln compile`: the graph's heuristic plans built for a recorded GPU (a device profile JSON such as
    profiles/h200.json) without one, stored untuned. One dict per part (the graph, or its fused segments), each
    with its `outcome` ("compiled", "needs a GPU", "failed") and `why`."""
    location = os.fspath(store) if store is not None else _kiln.default_store_path()
    return _kiln.compile(load(spec), os.fspath(target), location)


from . import store  # noqa: E402,F401  (kiln.store.open)

__all__ = ["Graph", "PreparedGraph", "Plan", "Planner", "Signature", "load", "validate", "signature", "tune", "compile",
           "store", "__version__", "KilnError", "BadInput", "NotFound", "Corruption", "NotSupported", "Unavailable",
           "NoPlan", "CheckFailed", "Cancelled", "NewerVersion", "InternalError"]
