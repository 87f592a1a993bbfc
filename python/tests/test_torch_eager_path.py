"""kiln.torch's eager path, on the host with torch (skipped without it; the GPU machine's venv has it): which calls
skip the dispatcher, and that torch.compile still sees the op (docs/python.md "Cost of a call")."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402
import kiln.torch as ktorch  # noqa: E402
from kiln import _kiln  # noqa: E402

plain = _kiln._torch_plain_call


def test_plain_tensors_and_parameters_skip_the_dispatcher():
    x = torch.zeros(2, 3)
    assert plain(x, x)
    assert plain(x, torch.nn.Parameter(torch.ones(3), requires_grad=False))
    with torch.no_grad():  # inference: a model's weights (parameters that require grad) take the eager path
        assert plain(x, torch.nn.Parameter(torch.ones(3)))
    assert plain()


def test_anything_torch_must_see_takes_the_dispatcher():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    x = torch.zeros(2, 3)
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(x)
    assert not plain(fake)
    assert not plain(x, fake)

    class Sub(torch.Tensor):
        pass

    assert not plain(x.as_subclass(Sub))
    assert not plain(x, 3)

    class Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class Function(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Dispatch():
        assert not plain(x)
    with Function():
        assert not plain(x)
    assert plain(x)


def test_transforms_tracing_profiling_and_autograd_take_the_dispatcher():
    """Found by a hostile review: inside these the eager path ran on tensors without storage (vmap, grad), traced
    only the output's allocation (jit.trace), hid the op from the profiler, or cut the outputs from autograd
    silently."""
    x = torch.zeros(2, 3)
    seen = []

    def probe(t):
        seen.append(plain(t))
        return t * 1

    torch.func.vmap(probe)(torch.zeros(4, 3))
    torch.func.grad(lambda t: probe(t).sum())(torch.zeros(3))
    torch.func.functionalize(probe)(x)
    torch.jit.trace(probe, (x,), check_trace=False)
    with torch.autograd.profiler.profile():
        probe(x)
    assert seen == [False] * 5, seen
    needs_grad = torch.zeros(3, requires_grad=True)
    assert not plain(x, needs_grad)
    with torch.no_grad():
        assert plain(x, needs_grad)
    with torch.inference_mode():
        assert plain(torch.zeros(3))


class RecordingRunner:
    """Stands in for the C++ runner: records eager calls, runs the op's CPU kernel."""

    def __init__(self):
        self.calls = 0

    def eager(self, handle, *inputs):
        self.calls += 1
        return inputs[0] * 3


@pytest.fixture(scope="module")
def triple():
    lib = torch.library.Library("kiln_eager_test", "FRAGMENT")
    lib.define("triple(Tensor x) -> Tensor")
    seen = []

    def kernel(x):
        seen.append(x.shape)
        return x * 3

    lib.impl("triple", kernel, "CPU")
    torch.library.register_fake("kiln_eager_test::triple", lambda x: torch.empty_like(x), lib=lib)
    yield torch.ops.kiln_eager_test.triple, seen
    lib._destroy()


def test_eager_calls_go_to_the_runner_and_compiled_ones_to_the_op(triple):
    handle, seen = triple
    runner = RecordingRunner()
    call = ktorch._make_call(handle, runner, "triple", 1)
    assert call.op is handle and call.__name__ == "triple"
    x = torch.arange(6.0).reshape(2, 3)
    torch.testing.assert_close(call(x), x * 3)
    assert runner.calls == 1 and seen == []

    dynamo = pytest.importorskip("torch._dynamo")
    dynamo.reset()
    explain = dynamo.explain(lambda t: call(t) + 1)(x)
    assert explain.graph_break_count == 0, explain.break_reasons
    assert any("kiln_eager_test.triple" in str(n.target) for g in explain.graphs for n in g.graph.nodes)
    compiled = torch.compile(lambda t: call(t) + 1, fullgraph=True, dynamic=True)
    for rows in (2, 5):
        t = torch.ones(rows, 3)
        torch.testing.assert_close(compiled(t), t * 3 + 1)
    assert runner.calls == 1, "a compiled call ran the eager path"
    assert len(seen) >= 2  # the op's own kernel ran for the compiled calls


def test_workspace_pool_starts_empty_and_releases():
    assert ktorch.workspace_pool_bytes() >= 0
    ktorch.release_workspaces()
    assert ktorch.workspace_pool_bytes() == 0
