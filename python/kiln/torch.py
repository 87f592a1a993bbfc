"""kiln.torch: a Kiln graph as a PyTorch custom op (docs/python.md "PyTorch").

    import kiln.torch
    mlp = kiln.torch.op("mlp_up.json", store="plans.db")      # torch.ops.kiln.<graph name>
    y = mlp(x, w, bias)                                        # outputs allocated by PyTorch

The op is registered with torch.library: a CUDA kernel (one call into Kiln: the plan for the inputs' shapes from
the Planner's cache, outputs from PyTorch's caching allocator on the inputs' device, the workspace from a pool kept
per device and stream, the plan on torch's current stream) and a fake kernel that gives the outputs' shapes, strides
and dtypes from the graph, so
torch.compile(fullgraph=True) traces it without a graph break, and dynamic dims stay dynamic. A CUDA graph that
torch captures (torch.cuda.graph) replays it; run the op once for each shape before capturing, as torch's own
warm-up asks (a plan built during a capture would synchronize the device and break the capture).
Inference only: the op has no backward.

`op` returns a callable, not torch.ops.kiln.<name> itself (its `.op` is that): an eager call on plain CUDA tensors
runs the kernel at once, without the dispatcher's Python-kernel path (1.4-3 us a call on an H100; docs/python.md
"Cost of a call"), in C++ against libtorch where kiln._torch_native was built for this torch (eager_path() says
which). There the callable is kiln._torch_native's call object itself, which torch.compile puts in its graph as it
is (torch.compiler.allow_in_graph): traced with fake tensors it calls torch.ops.kiln.<name>, so the compiled graph
calls the op. Elsewhere it is a Python function whose torch.compile branch calls the op. Anything torch must see
goes through torch.ops.kiln.<name>: fake, functional or subclassed tensors, a dispatch or function mode, a
functorch transform, the JIT tracer, the autograd profiler, and inputs that require grad while grad mode is on.
"""
from __future__ import annotations

import os
import re
import threading
from typing import Any, Callable

import torch as _torch

from . import Planner, _kiln, errors, load
from ._meta import output_meta

_LIB = _torch.library.Library("kiln", "FRAGMENT")
_lock = threading.Lock()
_ops: dict[str, tuple[str, Any, Any]] = {}  # op name -> (structure signature, the function op() returns, its runner)
_planners: dict[tuple, Planner] = {}

_DTYPES = {"fp32": _torch.float32, "fp16": _torch.float16, "bf16": _torch.bfloat16,
           "fp8_e4m3": getattr(_torch, "float8_e4m3fn", None), "fp8_e5m2": getattr(_torch, "float8_e5m2", None),
           "int8": _torch.int8, "int32": _torch.int32, "int64": _torch.int64}


def torch_dtype(kiln_dtype: str) -> "_torch.dtype":
    d = _DTYPES.get(kiln_dtype)
    if d is None:
        raise errors.NotSupported(f"dtype {kiln_dtype} has no torch dtype in this torch")
    return d


def planner_for(store: str | os.PathLike[str] | None, **options: Any) -> Planner:
    """The process's shared Planner for a store and options (made on first use): every op on one store shares
    its cache, its handles and its promotions."""
    key = (None if store is None else os.fspath(store),) + tuple(sorted(options.items()))
    with _lock:
        p = _planners.get(key)
        if p is None:
            p = _planners[key] = Planner(store, **options)
        return p


def _identifier(name: str) -> str:
    s = re.sub(r"\W", "_", name)
    return s if s and not s[0].isdigit() else "_" + s


def _make_fake(graph: Any) -> Callable[..., Any]:
    def fake(*inputs: "_torch.Tensor") -> Any:
        metas = output_meta(graph, [tuple(t.shape) for t in inputs])
        device = inputs[0].device
        outs = [_torch.empty_strided(shape, strides, dtype=torch_dtype(dt), device=device)
                for shape, strides, dt in metas]
        return outs[0] if len(outs) == 1 else tuple(outs)

    return fake


def _load_native() -> tuple[Any, str]:
    """kiln._torch_native (the eager call in C++ against libtorch) when it was built for this torch, and why not."""
    try:
        from . import _torch_native  # type: ignore[attr-defined]
    except ImportError as e:
        return None, f"kiln._torch_native is not available ({e}): built only where a torch is found at configure time"
    if _torch_native.torch_version != _torch.__version__:
        return None, (f"kiln._torch_native was built for torch {_torch_native.torch_version}, this is "
                      f"{_torch.__version__}: rebuild Kiln's Python package against this torch")
    return _torch_native, f"kiln._torch_native (C++, against torch {_torch_native.torch_version})"


_native, _native_why = _load_native()


def eager_path() -> str:
    """Which code runs an eager call on plain CUDA tensors: kiln._torch_native (C++ against libtorch: the tensors
    read and the outputs allocated in C++), or kiln._kiln's path (through Python objects; about 4-5 us more a call),
    with the reason."""
    return _native_why if _native is not None else "kiln._kiln's path: " + _native_why


def _make_call(handle: Any, runner: Any, op_name: str, n_in: int) -> Callable[..., Any]:
    doc = (f"torch.ops.kiln.{op_name}: the Kiln graph as a torch op ({n_in} tensor inputs, in the graph's order). "
           "Eager calls on plain CUDA tensors skip the dispatcher (kiln.torch's docstring).")
    allow = getattr(getattr(_torch, "compiler", None), "allow_in_graph", None)
    if _native is not None and allow is not None and isinstance(runner, _kiln.TorchRunner):
        # The call object itself, no Python function around it: Dynamo does not trace into it but puts it in the
        # graph as it is (allow_in_graph); the fake tensors it is traced with, and AOTAutograd's, are not plain, so
        # they go to `handle`, and the compiled graph calls torch.ops.kiln.<name>.
        call = _native.Call(runner, handle, _kiln._torch_bridge())
        call.__name__ = call.__qualname__ = op_name
        call.__module__ = __name__  # torch.fx names a graph's targets by module and name
        call.__doc__ = doc
        call.op = handle
        return allow(call)
    # Where kiln._torch_native is not built: a function that Dynamo traces into (its first branch only).
    is_compiling = _torch.compiler.is_compiling
    eager = runner.eager

    def call(*inputs: "_torch.Tensor") -> Any:
        if is_compiling():  # Dynamo traces this branch only: the op, with its fake kernel
            return handle(*inputs)
        return eager(handle, *inputs)

    call.__name__ = call.__qualname__ = op_name
    call.__doc__ = doc
    call.op = handle  # type: ignore[attr-defined]
    return call


def release_workspaces() -> int:
    """Drops the workspaces kiln.torch ops keep (one per device and stream, as large as the largest plan's that ran
    there); returns the bytes released. The next call allocates again."""
    n = workspace_pool_bytes()
    _kiln._torch_release_workspaces()
    if _native is not None:
        _native.release_workspaces()
    return n


def workspace_pool_bytes() -> int:
    """Bytes of workspace kiln.torch ops keep for their next calls."""
    return _kiln._torch_workspace_pool_bytes() + (_native.workspace_pool_bytes() if _native is not None else 0)


def op(spec: Any, store: str | os.PathLike[str] | None = None, *, name: str | None = None,
       planner: Planner | None = None, **planner_options: Any) -> Any:
    """Registers the graph as torch.ops.kiln.<name> (default: the graph's name, made an identifier) and returns the
    function that calls it (its `.op` is torch.ops.kiln.<name>; see the module's docstring for the eager path).

    Its arguments are the graph's inputs in declaration order (scalars passed by value are part of the graph, not
    arguments); it returns the graph's output, or a tuple of them. `planner` (a kiln.Planner) serves it; else the
    process's shared Planner for `store` and `planner_options` (kiln.Planner's keywords). Registering a name again
    for a graph of the same structure returns the op already made; for another structure, BadInput."""
    graph = load(spec)
    op_name = _identifier(name or graph.name)
    with _lock:
        known = _ops.get(op_name)
    if known is not None:
        if known[0] != graph.structure:
            raise errors.BadInput(f"kiln.torch.op: torch.ops.kiln.{op_name} is registered for another graph "
                                  f"(structure {known[0]}); pass name=")
        return known[1]
    p = planner if planner is not None else planner_for(store, **planner_options)
    runner = _kiln.TorchRunner(p._p.prepare(graph))
    # torch's dispatcher holds the op's kernel (this runner and its graph) until the interpreter has gone: nanobind
    # would report them at exit as leaked instances (seen on the GPU machine), which they are not.
    _kiln._set_leak_warnings(False)
    args = [_identifier(t["name"]) for t in graph.inputs]
    if len(set(args)) != len(args):
        args = [f"{a}_{i}" for i, a in enumerate(args)]
    n_out = len(graph.outputs)
    returns = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
    with _lock:
        if op_name in _ops:  # made by another thread meanwhile
            return _ops[op_name][1]
        _LIB.define(f"{op_name}({', '.join('Tensor ' + a for a in args)}) -> {returns}")
        _LIB.impl(op_name, runner, "CUDA")
        _torch.library.register_fake(f"kiln::{op_name}", _make_fake(graph), lib=_LIB)
        handle = getattr(_torch.ops.kiln, op_name)
        call = _make_call(handle, runner, op_name, len(args))
        _ops[op_name] = (graph.structure, call, runner)
    return call


def plan(op_handle: Any, *inputs: "_torch.Tensor") -> "_kiln.Plan":
    """The plan the op runs for these inputs (obtained, not run): its `source`, `why`, `config`, `workspace_bytes`.
    What a user reads to know what Kiln decided for a shape. `op_handle`: what kiln.torch.op returned, or its
    torch.ops.kiln.<name>."""
    with _lock:
        runners = [r for _, h, r in _ops.values() if h is op_handle or getattr(h, "op", None) is op_handle]
    if not runners:
        raise errors.BadInput("kiln.torch.plan: not an op made by kiln.torch.op")
    return runners[0].plan(*inputs)
