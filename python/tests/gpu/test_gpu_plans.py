"""kiln.Planner and plans on real CUDA tensors, checked against PyTorch's own ops."""
from __future__ import annotations

import pathlib

import pytest

import kiln

torch = pytest.importorskip("torch")
F = torch.nn.functional
ROOT = pathlib.Path(__file__).resolve().parents[3]
SMALL = ROOT / "examples" / "small"


@pytest.fixture(scope="module")
def planner():
    return kiln.Planner()


def conv_inputs(batch):
    g = torch.Generator(device="cuda").manual_seed(batch)
    x = torch.randn(batch, 8, 8, 8, device="cuda", generator=g).half().to(memory_format=torch.channels_last)
    w = (torch.randn(16, 8, 3, 3, device="cuda", generator=g) * 0.2).half().to(memory_format=torch.channels_last)
    bias = torch.randn(1, 16, 1, 1, device="cuda", generator=g).half().to(memory_format=torch.channels_last)
    return x, w, bias


def conv_reference(x, w, bias):
    return F.relu(F.conv2d(x.float(), w.float(), padding=1) + bias.float())


@pytest.mark.parametrize("batch", [2, 5, 16])
def test_conv_bias_relu_matches_torch(planner, batch):
    plan = planner.obtain(SMALL / "conv_bias_relu.json", batch=batch)
    x, w, bias = conv_inputs(batch)
    y = torch.empty(batch, 16, 8, 8, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    plan(x=x, w=w, bias=bias, y=y)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.float(), conv_reference(x, w, bias), rtol=1e-2, atol=1e-2)
    assert plan.source in {"heuristics", "dynamic", "padded", "split", "bucket", "memory", "store"}
    assert plan.config


def test_matmul_bias_gelu_matches_torch(planner):
    plan = planner.obtain(SMALL / "matmul_bias_gelu.json")
    a = torch.randn(1, 16, 32, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1, 32, 24, device="cuda", dtype=torch.bfloat16) * 0.2
    bias = torch.randn(1, 1, 24, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(1, 16, 24, device="cuda", dtype=torch.bfloat16)
    plan(a=a, b=b, bias=bias, y=y, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    ref = F.gelu(a.float() @ b.float() + bias.float())
    torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=2e-2)


class CAI:
    """A tensor seen only through the CUDA array interface (as CuPy and Numba export)."""

    def __init__(self, t):
        self._t = t
        self.__cuda_array_interface__ = t.__cuda_array_interface__


class DL:
    """A tensor seen only through DLPack (as JAX exports)."""

    def __init__(self, t):
        self._t = t

    def __dlpack__(self, **kw):
        return self._t.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


def test_cuda_array_interface_and_dlpack_tensors(planner):
    plan = planner.obtain(SMALL / "layer_norm.json", tokens=16)
    x = torch.randn(16, 32, 1, 1, device="cuda", dtype=torch.float16)
    gamma = torch.randn(1, 32, 1, 1, device="cuda")
    beta = torch.randn(1, 32, 1, 1, device="cuda")
    ref = F.layer_norm(x.float().reshape(16, 32), (32,), gamma.reshape(32), beta.reshape(32), 1e-5)
    for wrap in (CAI, DL):
        y = torch.zeros(16, 32, 1, 1, device="cuda", dtype=torch.float16)
        plan(x=wrap(x), gamma=wrap(gamma), beta=wrap(beta), y=wrap(y))
        torch.cuda.synchronize()
        torch.testing.assert_close(y.float().reshape(16, 32), ref, rtol=1e-2, atol=1e-2)


def test_a_workspace_may_be_passed(planner):
    plan = planner.obtain(SMALL / "conv_bias_relu.json", batch=2)
    x, w, bias = conv_inputs(2)
    y = torch.empty(2, 16, 8, 8, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    ws = torch.empty(max(plan.workspace_bytes, 16), device="cuda", dtype=torch.uint8)
    plan(x=x, w=w, bias=bias, y=y, workspace=ws)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.float(), conv_reference(x, w, bias), rtol=1e-2, atol=1e-2)
    if plan.workspace_bytes > 0:
        with pytest.raises(kiln.BadInput, match="workspace"):
            plan(x=x, w=w, bias=bias, y=y, workspace=torch.empty(1, device="cuda", dtype=torch.uint8))


def test_wrong_tensors_are_refused_before_anything_runs(planner):
    plan = planner.obtain(SMALL / "conv_bias_relu.json", batch=2)
    x, w, bias = conv_inputs(2)
    y = torch.full((2, 16, 8, 8), 7.0, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    cases = [
        (dict(x=x.float(), w=w, bias=bias, y=y), "tensor 'x': dtype torch.float32"),
        (dict(x=x.contiguous(), w=w, bias=bias, y=y), "tensor 'x': strides"),
        (dict(x=x.cpu(), w=w, bias=bias, y=y), "tensor 'x': a torch.Tensor on the host"),
        (dict(x=x[:1], w=w, bias=bias, y=y), "tensor 'x': shape (1, 8, 8, 8)"),
        (dict(w=w, bias=bias, y=y), "x"),
        (dict(x=x, w=w, bias=bias, y=y, z=y), "tensor 'z'"),
        (dict(x=None, w=w, bias=bias, y=y), "tensor 'x'"),
    ]
    for kwargs, needle in cases:
        with pytest.raises(kiln.BadInput) as e:
            plan(**kwargs)
        assert needle in e.value.message, e.value.message
    torch.cuda.synchronize()
    assert bool((y == 7.0).all()), "a refused call wrote its output"


def test_tune_then_serve_from_the_store(tmp_path):
    db = tmp_path / "plans.db"
    spec = SMALL / "conv_bias_relu.json"
    results = kiln.tune(spec, db, time_budget_s=30)
    assert len(results) == 1 and results[0]["winner"], results
    assert results[0]["stored"] and results[0]["passed"] >= 1
    with kiln.store.open(db, read_only=True) as s:
        rows = s.ls(tuned_only=True)
    assert [r["config"] for r in rows] == [results[0]["winner"]] or results[0].get("fusion")
    p = kiln.Planner(store=db)
    plan = p.obtain(spec)
    assert plan.source == "store", plan.why
    x, w, bias = conv_inputs(2)
    y = torch.empty(2, 16, 8, 8, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    plan(x=x, w=w, bias=bias, y=y)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.float(), conv_reference(x, w, bias), rtol=1e-2, atol=1e-2)
    assert p.obtain(spec).source == "memory"
    assert p.stats()["served"]["store"] == 1

    # A new Planner told to preload the graph loads (and warms) its stored plan as it is made: once that load is done
    # the first obtain is a memory hit, and it computes the same.
    q = kiln.Planner(store=db, preload=[spec])
    report = q.wait_for_preload()
    assert report["loaded"] == 1 and report["warmed"] == 1 and report["failed"] == 0, report
    first = q.obtain(spec)
    assert first.source == "memory", first.why
    y2 = torch.empty_like(y)
    first(x=x, w=w, bias=bias, y=y2)
    torch.cuda.synchronize()
    assert torch.equal(y2, y)
    assert q.stats()["served"]["store"] == 0


def sdpa_stats_spec(b, h, hk, sq, skv, d, causal):
    return {
        "name": "sdpa_stats",
        "io_dtype": "bf16",
        "tensors": {
            "q": {"dims": [b, h, sq, d]},
            "k": {"dims": [b, hk, skv, d]},
            "v": {"dims": [b, hk, skv, d]},
            "lse": {"dtype": "float32"},
        },
        "nodes": [{"name": "attn", "op": "sdpa", "causal": causal, "inputs": ["q", "k", "v"], "outputs": ["o", "lse"]}],
        "outputs": ["o", "lse"],
    }


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_softmax_statistics_match_torch(planner, causal):
    """The statistics output (an sdpa's second output) against torch.logsumexp of the scaled, masked scores."""
    b, h, hk, sq, skv, d = 2, 8, 2, 128, 192, 64
    plan = planner.obtain(sdpa_stats_spec(b, h, hk, sq, skv, d, causal))
    g = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(b, h, sq, d, device="cuda", generator=g).bfloat16()
    k = torch.randn(b, hk, skv, d, device="cuda", generator=g).bfloat16()
    v = torch.randn(b, hk, skv, d, device="cuda", generator=g).bfloat16()
    o = torch.empty(b, h, sq, d, device="cuda", dtype=torch.bfloat16)
    lse = torch.full((b, h, sq, 1), float("nan"), device="cuda", dtype=torch.float32)
    plan(q=q, k=k, v=v, o=o, lse=lse)
    torch.cuda.synchronize()
    kq, vq = k.float().repeat_interleave(h // hk, dim=1), v.float().repeat_interleave(h // hk, dim=1)
    scores = (q.float() @ kq.transpose(-1, -2)) / d**0.5
    if causal:  # top-left: query i sees keys 0..i
        mask = torch.ones(sq, skv, device="cuda", dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1, keepdim=True), rtol=1e-4, atol=2e-3)
    ref = torch.softmax(scores, dim=-1) @ vq
    torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)


def sdpa_backward_spec(b, h, hk, sq, skv, d, causal):
    return {
        "name": "sdpa_bwd",
        "io_dtype": "bf16",
        "tensors": {
            "q": {"dims": [b, h, sq, d]},
            "k": {"dims": [b, hk, skv, d]},
            "v": {"dims": [b, hk, skv, d]},
            "o": {"dims": [b, h, sq, d]},
            "do": {"dims": [b, h, sq, d]},
            "stats": {"dims": [b, h, sq, 1], "dtype": "float32"},
        },
        "nodes": [
            {
                "name": "grad",
                "op": "sdpa_backward",
                "causal": causal,
                "inputs": ["q", "k", "v", "o", "do", "stats"],
                "outputs": ["dq", "dk", "dv"],
            }
        ],
        "outputs": ["dq", "dk", "dv"],
    }


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_backward_matches_torch_autograd(planner, causal):
    """Kiln's forward (with its statistics) then Kiln's backward, against torch autograd through fp32 attention."""
    b, h, hk, sq, skv, d = 2, 8, 2, 128, 128, 64
    fwd = planner.obtain(sdpa_stats_spec(b, h, hk, sq, skv, d, causal))
    bwd = planner.obtain(sdpa_backward_spec(b, h, hk, sq, skv, d, causal))
    g = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(b, h, sq, d, device="cuda", generator=g).bfloat16()
    k = torch.randn(b, hk, skv, d, device="cuda", generator=g).bfloat16()
    v = torch.randn(b, hk, skv, d, device="cuda", generator=g).bfloat16()
    dout = torch.randn(b, h, sq, d, device="cuda", generator=g).bfloat16()
    o = torch.empty(b, h, sq, d, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(b, h, sq, 1, device="cuda", dtype=torch.float32)
    fwd(q=q, k=k, v=v, o=o, lse=lse)
    dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
    bwd(q=q, k=k, v=v, o=o, do=dout, stats=lse, dq=dq, dk=dk, dv=dv)
    torch.cuda.synchronize()
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(
        qf, kf.repeat_interleave(h // hk, dim=1), vf.repeat_interleave(h // hk, dim=1), is_causal=causal
    )
    ref.backward(dout.float())
    for name, got, want in (("dq", dq, qf.grad), ("dk", dk, kf.grad), ("dv", dv, vf.grad)):
        err = (got.float() - want).abs().max().item()
        scale = want.abs().max().item()
        assert err <= 0.02 * scale + 1e-2, f"{name}: max error {err} against max |grad| {scale}"


FP8_SCALES = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")


def sdpa_fp8_spec(b, h, hk, s, d, causal):
    tensors = {"q": {"dims": [b, h, s, d]}, "k": {"dims": [b, hk, s, d]}, "v": {"dims": [b, hk, s, d]}}
    tensors.update({n: {"dims": [1, 1, 1, 1], "dtype": "float32"} for n in FP8_SCALES})
    tensors.update({"o": {"dtype": "fp8_e4m3"}, "amax_o": {"dtype": "float32"}})
    return {
        "name": "sdpa_fp8",
        "io_dtype": "fp8_e4m3",
        "tensors": tensors,
        "nodes": [
            {
                "name": "attn",
                "op": "sdpa_fp8",
                "causal": causal,
                "inputs": ["q", "k", "v", *FP8_SCALES],
                "outputs": ["o", "amax_o"],
            }
        ],
        "outputs": ["o", "amax_o"],
    }


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_fp8_matches_torch_and_amax_o_is_the_calls_own(planner, causal):
    """FP8 attention against torch's attention on the descaled operands; amax_o is this call's max |o| (before
    scale_o), whatever the buffer held before: a caller reusing one amax buffer across steps gets each step's own."""
    b, h, hk, s, d = 2, 8, 2, 256, 128
    plan = planner.obtain(sdpa_fp8_spec(b, h, hk, s, d, causal))
    g = torch.Generator(device="cuda").manual_seed(11)

    def fp8(x):  # e4m3 at scale 448 / amax, and its descale
        scale = 448.0 / x.abs().amax().float()
        return (x * scale).to(torch.float8_e4m3fn), (1.0 / scale).reshape(1, 1, 1, 1)

    (q8, dq), (k8, dk), (v8, dv) = (fp8(torch.randn(b, n, s, d, device="cuda", generator=g)) for n in (h, hk, hk))
    one = torch.ones(1, 1, 1, 1, device="cuda")
    scales = {"descale_q": dq, "descale_k": dk, "descale_v": dv, "descale_s": one / 448.0, "scale_s": one * 448.0,
              "scale_o": one * 2.0}
    o8 = torch.empty(b, h, s, d, device="cuda", dtype=torch.float8_e4m3fn)
    qf, kf, vf = q8.float() * dq, k8.float() * dk, v8.float() * dv
    ref = F.scaled_dot_product_attention(
        qf, kf.repeat_interleave(h // hk, dim=1), vf.repeat_interleave(h // hk, dim=1), is_causal=causal
    )
    want_amax = ref.abs().max().item()
    for before in (1.0e6, 0.0, -1.0):
        amax = torch.full((1, 1, 1, 1), before, device="cuda", dtype=torch.float32)
        plan(q=q8, k=k8, v=v8, o=o8, amax_o=amax, **scales)
        torch.cuda.synchronize()
        got_amax = amax.item()
        assert abs(got_amax - want_amax) <= 0.1 * want_amax, (
            f"amax_o {got_amax} after a call on a buffer holding {before}; this call's max |o| is {want_amax}"
        )
    err = (o8.float() / 2.0 - ref).abs().max().item()
    assert err <= 0.1 * want_amax, f"o: max error {err} against max |o| {want_amax}"


FP8_BWD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_do", "descale_s", "descale_dp",
                  "scale_s", "scale_dq", "scale_dk", "scale_dv", "scale_dp")
FP8_BWD_OUTS = ("dq", "dk", "dv", "amax_dq", "amax_dk", "amax_dv", "amax_dp")


def sdpa_fp8_backward_spec(b, h, hk, s, d, causal):
    tensors = {n: {"dims": [b, heads, s, d]} for n, heads in (("q", h), ("k", hk), ("v", hk), ("o", h), ("do", h))}
    tensors["stats"] = {"dims": [b, h, s, 1], "dtype": "float32"}
    tensors.update({n: {"dims": [1, 1, 1, 1], "dtype": "float32"} for n in FP8_BWD_SCALES})
    tensors.update({n: {"dtype": "float32"} for n in FP8_BWD_OUTS[3:]})
    return {
        "name": "sdpa_fp8_backward",
        "io_dtype": "fp8_e4m3",
        "tensors": tensors,
        "nodes": [
            {
                "name": "grad",
                "op": "sdpa_fp8_backward",
                "causal": causal,
                "inputs": ["q", "k", "v", "o", "do", "stats", *FP8_BWD_SCALES],
                "outputs": list(FP8_BWD_OUTS),
            }
        ],
        "outputs": list(FP8_BWD_OUTS),
    }


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_fp8_backward_matches_torch_autograd(planner, causal):
    """FP8 attention's backward pass against torch.autograd through fp32 attention on the descaled q, k, v (grouped
    heads), with dO descaled too and o and the statistics that forward's; each gradient read back at its scale, each
    amax against torch's: amax_dp against max |attn_scale dS|, dS = P (dP - D) (the message also gives max |dP| and
    max |dP - D|, should cuDNN's amax_dp be of another)."""
    b, h, hk, s, d = 2, 8, 2, 256, 128
    # No first-use check: this test is the one against torch, whatever Kiln's own references say.
    plan = kiln.Planner(first_use="off").obtain(sdpa_fp8_backward_spec(b, h, hk, s, d, causal))
    g = torch.Generator(device="cuda").manual_seed(13)
    one = torch.ones(1, 1, 1, 1, device="cuda")

    def fp8(x):  # e4m3 at scale 448 / amax, and its descale
        scale = 448.0 / x.abs().amax().float()
        return (x * scale).to(torch.float8_e4m3fn), (1.0 / scale).reshape(1, 1, 1, 1)

    (q8, sq), (k8, sk), (v8, sv), (do8, sdo) = (
        fp8(torch.randn(b, n, s, d, device="cuda", generator=g)) for n in (h, hk, hk, h))
    qf, kf, vf, dof = (x.float() * sc for x, sc in ((q8, sq), (k8, sk), (v8, sv), (do8, sdo)))
    qg, kg, vg = (x.clone().requires_grad_() for x in (qf, kf, vf))
    kr, vr = (x.repeat_interleave(h // hk, dim=1) for x in (kg, vg))
    scores = qg @ kr.transpose(-1, -2) / d**0.5
    if causal:
        scores = scores.masked_fill(torch.ones(s, s, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    p = torch.exp(scores - lse)
    o = p @ vr
    want = torch.autograd.grad(o, (qg, kg, vg), dof)
    with torch.no_grad():
        dp = dof @ vr.transpose(-1, -2)
        dp_minus_d = dp - (dof * o).sum(-1, keepdim=True)
        ds = p * dp_minus_d / d**0.5  # cuDNN's dS carries attn_scale (cuDNN Frontend 1.32's sdpa_fp8_backward)
    o8, so = fp8(o.detach())
    amax = [x.abs().max().item() for x in (*want, ds)]
    # Scales as delayed scaling would set them (with room for fp8's rounding): P at 448, dS and the gradients at 256
    # over their amax.
    scales = {"descale_q": sq, "descale_k": sk, "descale_v": sv, "descale_o": so, "descale_do": sdo,
              "descale_s": one / 448.0, "scale_s": one * 448.0, "descale_dp": one * amax[3] / 256.0,
              "scale_dp": one * 256.0 / amax[3]}
    for name, a in zip(("scale_dq", "scale_dk", "scale_dv"), amax):
        scales[name] = one * 256.0 / a
    grads = [torch.empty(b, heads, s, d, device="cuda", dtype=torch.float8_e4m3fn) for heads in (h, hk, hk)]
    amaxes = [torch.full((1, 1, 1, 1), -1.0, device="cuda") for _ in range(4)]
    plan(q=q8, k=k8, v=v8, o=o8, do=do8, stats=lse.detach().float(), **scales,
         **dict(zip(FP8_BWD_OUTS, grads + amaxes)))
    torch.cuda.synchronize()
    for name, got, ref, a, sc in zip(("dq", "dk", "dv"), grads, want, amax, ("scale_dq", "scale_dk", "scale_dv")):
        err = (got.float() / scales[sc] - ref).abs().max().item()
        assert err <= 0.1 * a, f"{name}: max error {err} against max |{name}| {a}"
    for name, got, a in zip(FP8_BWD_OUTS[3:], amaxes, amax):
        extra = "" if name != "amax_dp" else (f" (max |dP| {dp.abs().max().item()}, max |dP - D| "
                                               f"{dp_minus_d.abs().max().item()})")
        assert abs(got.item() - a) <= 0.1 * a, f"{name} {got.item()} against torch's {a}{extra}"


def sdpa_ragged_spec(b, h, hk, s, d, causal, stats=False):
    def thd(heads):
        return {"dims": [b, heads, s, d], "strides": [s * heads * d, d, heads * d, 1]}

    i32 = {"dtype": "int32"}
    tensors = {"q": thd(h), "k": thd(hk), "v": thd(hk)}
    tensors.update({n: {"dims": [b, 1, 1, 1], **i32} for n in ("lq", "lkv")})
    tensors.update({n: {"dims": [b + 1, 1, 1, 1], **i32} for n in ("off_q", "off_k", "off_v", "off_o")})
    outputs = ["o", "lse"] if stats else ["o"]
    if stats:
        tensors["lse"] = {"dtype": "float32"}
    return {
        "name": "sdpa_ragged",
        "io_dtype": "bf16",
        "tensors": tensors,
        "nodes": [
            {
                "name": "attn",
                "op": "sdpa",
                "causal": causal,
                "padding_mask": True,
                "ragged": True,
                "inputs": ["q", "k", "v", "lq", "lkv", "off_q", "off_k", "off_v", "off_o"],
                "outputs": outputs,
            }
        ],
        "outputs": outputs,
    }


def sdpa_ragged_backward_spec(b, h, hk, s, d, causal):
    def thd(heads):
        return {"dims": [b, heads, s, d], "strides": [s * heads * d, d, heads * d, 1]}

    i32 = {"dtype": "int32"}
    tensors = {"q": thd(h), "k": thd(hk), "v": thd(hk), "o": thd(h), "do": thd(h)}
    tensors["stats"] = {"dims": [b, h, s, 1], "dtype": "float32"}
    tensors.update({n: {"dims": [b, 1, 1, 1], **i32} for n in ("lq", "lkv")})
    tensors.update({n: {"dims": [b + 1, 1, 1, 1], **i32} for n in ("off_q", "off_k", "off_v", "off_o")})
    return {
        "name": "sdpa_ragged_bwd",
        "io_dtype": "bf16",
        "tensors": tensors,
        "nodes": [
            {
                "name": "grad",
                "op": "sdpa_backward",
                "causal": causal,
                "padding_mask": True,
                "ragged": True,
                "inputs": ["q", "k", "v", "o", "do", "stats", "lq", "lkv", "off_q", "off_k", "off_v", "off_o"],
                "outputs": ["dq", "dk", "dv"],
            }
        ],
        "outputs": ["dq", "dk", "dv"],
    }


def pack_tokens(lens, gap):
    """Token offsets: each entry after the previous one's rows and `gap` unused tokens, then the end."""
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n + gap)
    return starts


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_ragged_backward_matches_torch_autograd_per_sequence(planner, causal):
    """Kiln's ragged forward (with its statistics) then Kiln's ragged backward, sequences of different lengths
    packed with gaps; each sequence's dq, dk, dv against torch autograd over that sequence alone (fp32); the gaps
    and the rows no sequence owns are left as they were."""
    b, h, hk, s, d = 3, 4, 2, 64, 64
    lq, lkv = [64, 17, 40], [64, 30, 40]
    fwd = planner.obtain(sdpa_ragged_spec(b, h, hk, s, d, causal, stats=True))
    bwd = planner.obtain(sdpa_ragged_backward_spec(b, h, hk, s, d, causal))
    g = torch.Generator(device="cuda").manual_seed(17)
    q_tok, k_tok, v_tok, o_tok = pack_tokens(lq, 3), pack_tokens(lkv, 2), pack_tokens(lkv, 1), pack_tokens(lq, 1)
    heads = {"q": h, "k": hk, "v": hk, "o": h, "do": h, "dq": h, "dk": hk, "dv": hk}
    bufs = {n: torch.randn(b * s, heads[n], d, device="cuda", generator=g).bfloat16() for n in ("q", "k", "v", "do")}
    bufs.update({n: torch.full((b * s, heads[n], d), 7.0, device="cuda", dtype=torch.bfloat16)
                 for n in ("o", "dq", "dk", "dv")})
    lse = torch.empty(b, h, s, 1, device="cuda", dtype=torch.float32)

    def view(name):
        return bufs[name].view(b, s, heads[name], d).permute(0, 2, 1, 3)

    def i32(values, shape):
        return torch.tensor(values, device="cuda", dtype=torch.int32).reshape(shape)

    common = {
        "lq": i32(lq, (b, 1, 1, 1)), "lkv": i32(lkv, (b, 1, 1, 1)),
        "off_q": i32([t * h * d for t in q_tok], (b + 1, 1, 1, 1)),
        "off_k": i32([t * hk * d for t in k_tok], (b + 1, 1, 1, 1)),
        "off_v": i32([t * hk * d for t in v_tok], (b + 1, 1, 1, 1)),
        "off_o": i32([t * h * d for t in o_tok], (b + 1, 1, 1, 1)),
    }
    fwd(q=view("q"), k=view("k"), v=view("v"), o=view("o"), lse=lse, **common)
    bwd(q=view("q"), k=view("k"), v=view("v"), o=view("o"), do=view("do"), stats=lse,
        dq=view("dq"), dk=view("dk"), dv=view("dv"), **common)
    torch.cuda.synchronize()
    owned = {n: torch.zeros(b * s, dtype=torch.bool, device="cuda") for n in ("dq", "dk", "dv")}
    for e in range(b):
        def rows(name, tok, n):
            return bufs[name][tok[e]: tok[e] + n].float().permute(1, 0, 2)  # [heads, n, d]

        qf = rows("q", q_tok, lq[e]).requires_grad_()
        kf = rows("k", k_tok, lkv[e]).requires_grad_()
        vf = rows("v", v_tok, lkv[e]).requires_grad_()
        mask = torch.ones(lq[e], lkv[e], device="cuda", dtype=torch.bool).tril() if causal else None
        ref = F.scaled_dot_product_attention(
            qf, kf.repeat_interleave(h // hk, dim=0), vf.repeat_interleave(h // hk, dim=0), attn_mask=mask
        )
        ref.backward(rows("do", o_tok, lq[e]))
        for name, tok, n, want in (("dq", q_tok, lq[e], qf.grad), ("dk", k_tok, lkv[e], kf.grad),
                                   ("dv", v_tok, lkv[e], vf.grad)):
            got = rows(name, tok, n)
            err = (got - want).abs().max().item()
            scale = want.abs().max().item()
            assert err <= 0.02 * scale + 1e-2, f"entry {e} {name}: max error {err} against max |grad| {scale}"
            owned[name][tok[e]: tok[e] + n] = True
    for name in ("dq", "dk", "dv"):
        untouched = bufs[name][~owned[name]]
        assert untouched.numel() > 0 and torch.all(untouched == 7.0), f"{name}: rows no sequence owns were written"


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_ragged_matches_torch_per_sequence(planner, causal):
    """Ragged (THD) attention: sequences of different lengths packed with gaps between them; each sequence's output
    against torch's attention over that sequence alone; the gaps and o's unused rows are left as they were."""
    b, h, hk, s, d = 3, 4, 2, 64, 64
    lq, lkv = [64, 17, 40], [64, 30, 40]
    plan = planner.obtain(sdpa_ragged_spec(b, h, hk, s, d, causal))
    g = torch.Generator(device="cuda").manual_seed(13)

    def pack(lens, gap):  # token offsets: each entry after the previous one's rows and `gap` unused tokens
        starts = [0]
        for n in lens:
            starts.append(starts[-1] + n + gap)
        return starts

    sq_tok, skv_tok, so_tok = pack(lq, 3), pack(lkv, 2), pack(lq, 1)
    bufs = {
        "q": torch.randn(b * s, h, d, device="cuda", generator=g).bfloat16(),
        "k": torch.randn(b * s, hk, d, device="cuda", generator=g).bfloat16(),
        "v": torch.randn(b * s, hk, d, device="cuda", generator=g).bfloat16(),
    }
    o = torch.full((b * s, h, d), 7.0, device="cuda", dtype=torch.bfloat16)

    def view(buf, heads):
        return buf.view(b, s, heads, d).permute(0, 2, 1, 3)

    def i32(values, shape):
        return torch.tensor(values, device="cuda", dtype=torch.int32).reshape(shape)

    plan(
        q=view(bufs["q"], h), k=view(bufs["k"], hk), v=view(bufs["v"], hk), o=view(o, h),
        lq=i32(lq, (b, 1, 1, 1)), lkv=i32(lkv, (b, 1, 1, 1)),
        off_q=i32([t * h * d for t in sq_tok], (b + 1, 1, 1, 1)),
        off_k=i32([t * hk * d for t in skv_tok], (b + 1, 1, 1, 1)),
        off_v=i32([t * hk * d for t in skv_tok], (b + 1, 1, 1, 1)),
        off_o=i32([t * h * d for t in so_tok], (b + 1, 1, 1, 1)),
    )
    torch.cuda.synchronize()
    written = torch.zeros(b * s, dtype=torch.bool)
    for e in range(b):
        q = bufs["q"][sq_tok[e]: sq_tok[e] + lq[e]].float().permute(1, 0, 2)  # [h, lq, d]
        k = bufs["k"][skv_tok[e]: skv_tok[e] + lkv[e]].float().permute(1, 0, 2)
        v = bufs["v"][skv_tok[e]: skv_tok[e] + lkv[e]].float().permute(1, 0, 2)
        k, v = k.repeat_interleave(h // hk, dim=0), v.repeat_interleave(h // hk, dim=0)
        mask = None
        if causal:  # top-left: query i sees keys 0..i of its own sequence
            mask = torch.ones(lq[e], lkv[e], device="cuda", dtype=torch.bool).tril()
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        got = o[so_tok[e]: so_tok[e] + lq[e]].float().permute(1, 0, 2)
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2, msg=f"entry {e}")
        written[so_tok[e]: so_tok[e] + lq[e]] = True
    untouched = o[~written.to(o.device)]
    assert torch.all(untouched == 7.0), "rows of o that belong to no sequence were written"


RMS_NORM_BF16 = {
    "name": "rms_norm_16384x1024", "io_dtype": "bf16", "intermediate_dtype": "fp32", "compute_dtype": "fp32",
    "tensors": {"x": {"dims": [16384, 1024, 1, 1], "layout": "NCHW"}, "gamma": {"dims": [1, 1024, 1, 1], "layout": "NCHW"}},
    "nodes": [{"name": "norm", "op": "rms_norm", "inputs": ["x", "gamma"], "outputs": ["y"], "epsilon": 1e-05}],
    "outputs": ["y"],
}


def test_tune_with_build_helpers_stores_a_plan_that_matches_torch(tmp_path):
    """kiln.tune's build helpers (this interpreter on kiln._build_helper): the candidate budget compiles its first 4
    per build lane (3 lanes with 2 helpers: at least as many pass as with none), the winner is at least as fast
    within the noise, and the stored plan computes torch's RMS norm."""
    here = kiln.tune(RMS_NORM_BF16, tmp_path / "here.db", unfused=False, build_helpers=0)
    helped = kiln.tune(RMS_NORM_BF16, tmp_path / "helped.db", unfused=False, build_helpers=2)
    assert here[0]["winner"] and helped[0]["winner"], (here, helped)
    assert helped[0]["candidates"] == here[0]["candidates"]
    assert helped[0]["passed"] >= max(here[0]["passed"], 12), (here, helped)  # 4 per lane: 4 without helpers
    assert helped[0]["median_ms"] <= here[0]["median_ms"] * 1.10, (here, helped)  # a superset, timed again
    plan = kiln.Planner(store=tmp_path / "helped.db").obtain(RMS_NORM_BF16)
    assert plan.source == "store", plan.why
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(16384, 1024, 1, 1, device="cuda", generator=g).bfloat16()
    gamma = torch.randn(1, 1024, 1, 1, device="cuda", generator=g).bfloat16()
    y = torch.empty_like(x)
    plan(x=x, gamma=gamma, y=y)
    torch.cuda.synchronize()
    xf = x.float().reshape(16384, 1024)
    ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * gamma.float().reshape(1, 1024)
    torch.testing.assert_close(y.float().reshape(16384, 1024), ref, rtol=2e-2, atol=5e-2)
