"""kiln.torch ops in PyTorch: eager against torch's own ops, torch.compile(fullgraph=True) with no graph break,
fake tensors, dynamic shapes, CUDA graph capture and many threads."""
from __future__ import annotations

import threading

import pytest

import kiln

torch = pytest.importorskip("torch")
import kiln.torch as ktorch  # noqa: E402

from specs import mlp_up_spec  # noqa: E402

F = torch.nn.functional
D, H = 256, 512


@pytest.fixture(scope="module")
def op():
    return ktorch.op(mlp_up_spec("gpu_mlp_up", D, H), promote=True)


@pytest.fixture(scope="module")
def weights():
    g = torch.Generator(device="cuda").manual_seed(0)
    w = (torch.randn(1, D, H, device="cuda", generator=g) / D**0.5).bfloat16()
    bias = torch.randn(1, 1, H, device="cuda", generator=g).bfloat16()
    return w, bias


def reference(x, w, bias):
    return F.gelu(x.float() @ w.float() + bias.float())


def x_of(tokens, seed=1):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(1, tokens, D, device="cuda", generator=g).bfloat16()


@pytest.mark.parametrize("tokens", [64, 1, 100, 64, 257])
def test_eager_matches_torch(op, weights, tokens):
    w, bias = weights
    x = x_of(tokens)
    y = op(x, w, bias)
    assert y.shape == (1, tokens, H) and y.dtype == torch.bfloat16 and y.is_cuda
    torch.testing.assert_close(y.float(), reference(x, w, bias), rtol=2e-2, atol=2e-2)


def test_registering_twice_returns_the_same_op_and_a_clash_is_refused(op):
    assert ktorch.op(mlp_up_spec("gpu_mlp_up", D, H), promote=True) is op
    with pytest.raises(kiln.BadInput, match="registered for another graph"):
        ktorch.op(mlp_up_spec("gpu_mlp_up", D, 2 * H))


def test_fake_tensor_shapes(op, weights):
    from torch._subclasses.fake_tensor import FakeTensorMode

    w, bias = weights
    with FakeTensorMode() as mode:
        x = torch.empty(1, 77, D, dtype=torch.bfloat16, device="cuda")
        fw = mode.from_tensor(w)
        fb = mode.from_tensor(bias)
        y = op(x, fw, fb)
        assert y.shape == (1, 77, H) and y.dtype == torch.bfloat16 and y.stride() == (77 * H, H, 1)


def test_compile_fullgraph_has_no_graph_break_and_matches_eager(op, weights):
    import torch._dynamo

    w, bias = weights

    def block(x):
        h = op(x, w, bias)
        return h * 2 + 1

    torch._dynamo.reset()
    explain = torch._dynamo.explain(block)(x_of(64))
    assert explain.graph_break_count == 0, explain.break_reasons
    assert explain.graph_count == 1
    compiled = torch.compile(block, fullgraph=True, dynamic=True)
    for tokens in (64, 80, 129):
        x = x_of(tokens, seed=tokens)
        torch.testing.assert_close(compiled(x), block(x), rtol=0, atol=0)


def test_compiled_graphs_call_the_torch_op(op, weights):
    """Where `op` is kiln._torch_native's call object (no Python function around it), Dynamo puts it in its graph
    (allow_in_graph) and AOTAutograd's trace records torch.ops.kiln.<name>: the graph a backend compiles calls the
    op, with dynamic tokens, and matches eager."""
    import torch._dynamo
    from torch._dynamo.backends.common import aot_autograd

    w, bias = weights
    forwards = []

    def keep(gm, example_inputs):
        forwards.append(gm)
        return gm

    def block(x):
        return op(x, w, bias) * 2 + 1

    torch._dynamo.reset()
    compiled = torch.compile(block, backend=aot_autograd(fw_compiler=keep), fullgraph=True, dynamic=True)
    with torch.no_grad():
        for tokens in (48, 96):
            x = x_of(tokens, seed=tokens + 1)
            torch.testing.assert_close(compiled(x), block(x), rtol=0, atol=0)
    targets = [str(n.target) for gm in forwards for n in gm.graph.nodes]
    assert any("kiln.gpu_mlp_up" in t for t in targets), targets
    if ktorch._native is not None:
        assert isinstance(op, ktorch._native.Call) and op.op is torch.ops.kiln.gpu_mlp_up


def test_cuda_graph_capture_replays(op, weights):
    w, bias = weights
    static_x = x_of(128, seed=5)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm-up, as torch asks: the plan for this shape is held before the capture
            op(static_x, w, bias)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = op(static_x, w, bias)
    for seed in (6, 7, 8):
        static_x.copy_(x_of(128, seed=seed))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(static_y.float(), reference(static_x, w, bias), rtol=2e-2, atol=2e-2)


def test_many_threads(op, weights):
    w, bias = weights
    errors = []

    def worker(i):
        try:
            for j in range(20):
                tokens = 16 * (1 + (i + j) % 8)
                x = x_of(tokens, seed=1000 * i + j)
                y = op(x, w, bias)
                torch.testing.assert_close(y.float(), reference(x, w, bias), rtol=2e-2, atol=2e-2)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {i}: {e!r}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_wrong_inputs_raise_bad_input(op, weights):
    w, bias = weights
    with pytest.raises(kiln.BadInput, match="tensor 'x': dtype torch.float32"):
        op(x_of(8).float(), w, bias)
    with pytest.raises(kiln.BadInput, match="tensor 'w'"):
        op(x_of(8), w.transpose(1, 2).contiguous().transpose(1, 2), bias)
    with pytest.raises(kiln.BadInput, match="tensor 'bias'"):
        op(x_of(8), w, bias.reshape(1, H, 1))
    with pytest.raises(kiln.BadInput, match="3 inputs given|takes 3"):
        op(x_of(8), w)
    with pytest.raises(kiln.BadInput, match="on the host"):
        op(x_of(8).cpu(), w.cpu(), bias.cpu())


def test_the_eager_call_runs_in_cpp_where_built_and_both_paths_agree(op, weights):
    """Where kiln._torch_native was built for this torch (the GPU machine's prebuilt tree), the eager call runs
    there; kiln._kiln's path gives the same bits for the same inputs."""
    import os

    path = ktorch.eager_path()
    if os.environ.get("KILN_EXPECT_TORCH_NATIVE"):
        assert path.startswith("kiln._torch_native"), path
    w, bias = weights
    runner = ktorch._ops["gpu_mlp_up"][2]
    for tokens in (1, 64, 100):
        x = x_of(tokens, seed=40 + tokens)
        assert torch.equal(op(x, w, bias), runner.eager(op.op, x, w, bias))
        assert torch.equal(op(x, w, bias), op.op(x, w, bias))


def test_a_workspace_pooled_per_stream_survives_other_streams(op, weights):
    w, bias = weights
    x = x_of(64, seed=3)
    want = op(x, w, bias)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        got = op(x, w, bias)
    side.synchronize()
    assert torch.equal(got, want)
    assert ktorch.workspace_pool_bytes() >= 0
    ktorch.release_workspaces()
    assert ktorch.workspace_pool_bytes() == 0
    assert torch.equal(op(x, w, bias), want)


def test_the_cpp_call_sends_what_torch_must_see_to_the_dispatcher(op, weights):
    """kiln._torch_native's routing with a real runner: fake tensors and keyword arguments reach torch.ops.kiln.<name>
    (its fake kernel; its schema's names), host tensors the runner's checks."""
    if ktorch._native is None:
        pytest.skip("kiln._torch_native not built for this torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    w, bias = weights
    runner = ktorch._ops["gpu_mlp_up"][2]
    call = ktorch._native.Call(runner, op.op, kiln._kiln._torch_bridge())
    x = x_of(24, seed=5)
    want = call(x, w, bias)
    assert torch.equal(call(x=x, w=w, bias=bias), want)
    with FakeTensorMode() as mode:
        out = call(mode.from_tensor(x), mode.from_tensor(w), mode.from_tensor(bias))
    assert out.shape == (1, 24, H) and out.dtype == torch.bfloat16
    with pytest.raises(kiln.BadInput, match="on the host"):
        call(x.cpu(), w.cpu(), bias.cpu())
    with pytest.raises(TypeError, match="already initialised"):
        call.__init__(runner, op.op, kiln._kiln._torch_bridge())


def attention_ops(b, h, hk, s, d):
    """Kiln's attention forward (with its statistics) and backward as torch ops, and an autograd.Function of them:
    what a training loop would use."""
    dims = {"q": [b, h, s, d], "k": [b, hk, s, d], "v": [b, hk, s, d]}
    fwd = ktorch.op({"name": f"attn_fwd_{b}_{h}_{hk}_{s}_{d}", "io_dtype": "bf16",
                     "tensors": {**{n: {"dims": x} for n, x in dims.items()}, "lse": {"dtype": "float32"}},
                     "nodes": [{"name": "attn", "op": "sdpa", "causal": True, "inputs": ["q", "k", "v"],
                                "outputs": ["o", "lse"]}],
                     "outputs": ["o", "lse"]})
    bwd = ktorch.op({"name": f"attn_bwd_{b}_{h}_{hk}_{s}_{d}", "io_dtype": "bf16",
                     "tensors": {**{n: {"dims": x} for n, x in dims.items()}, "o": {"dims": [b, h, s, d]},
                                 "do": {"dims": [b, h, s, d]}, "stats": {"dims": [b, h, s, 1], "dtype": "float32"}},
                     "nodes": [{"name": "grad", "op": "sdpa_backward", "causal": True,
                                "inputs": ["q", "k", "v", "o", "do", "stats"], "outputs": ["dq", "dk", "dv"]}],
                     "outputs": ["dq", "dk", "dv"]})

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            o, lse = fwd(q, k, v)
            ctx.save_for_backward(q, k, v, o, lse)
            return o

        @staticmethod
        def backward(ctx, dout):
            q, k, v, o, lse = ctx.saved_tensors
            return bwd(q, k, v, o, dout.contiguous(), lse)

    return Attention.apply


def test_attention_forward_and_backward_as_torch_ops_train_like_torch():
    """An autograd.Function over Kiln's forward and backward ops: the gradients of a loss through it match torch
    autograd through fp32 attention."""
    b, h, hk, s, d = 2, 8, 2, 256, 64
    attention = attention_ops(b, h, hk, s, d)
    g = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (torch.randn(*shape, device="cuda", generator=g).bfloat16().requires_grad_()
               for shape in ((b, h, s, d), (b, hk, s, d), (b, hk, s, d)))
    target = torch.randn(b, h, s, d, device="cuda", generator=g)
    loss = ((attention(q, k, v).float() - target) ** 2).mean()
    loss.backward()
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qf, kf, vf, is_causal=True, enable_gqa=True)
    ((ref - target) ** 2).mean().backward()
    for name, got, want in (("dq", q.grad, qf.grad), ("dk", k.grad, kf.grad), ("dv", v.grad, vf.grad)):
        err = (got.float() - want).abs().max().item()
        scale = want.abs().max().item()
        assert err <= 0.03 * scale + 1e-5, f"{name}: max error {err} against max |grad| {scale}"
