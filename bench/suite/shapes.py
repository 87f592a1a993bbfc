"""The benchmark suite's cases: one list shared by the Kiln side, the PyTorch side and the report.

Each case is a dict:
  family   conv_bias_relu | matmul_bias_gelu | matmul | matmul_amax | fp8_recipe | sdpa | sdpa_band | layer_norm |
           rms_norm
  name     a short label, unique in the suite ("3x3 64->64 56x56 n32")
  id       a file-name-safe id ("conv_bias_relu_3x3_64to64_56_n32")
  dtype    the I/O dtype ("fp16", "bf16", "fp8_e4m3" for the FP8 recipe's inputs)
  params   the shape: conv {n,c,h,w,k,r,s,pad,stride}; matmul families {m,k,n}; sdpa {b,h,s,d,causal};
           norms {tokens,hidden}
  flops    the op's floating-point operations (2 per multiply-add; attention 4*B*H*S*S*D, halved when causal;
           norms count none: they are measured against the copy bandwidth)
  min_bytes  the least memory the op must move: every input read once and every output written once
  spec     the Kiln JSON spec of the case (kiln_spec(case))

Kiln's specs follow examples/: NHWC convs with the bias as [1,K,1,1]; matmuls as [1,M,K] x [1,K,N] with the
bias [1,1,N]; norms as [tokens,hidden,1,1] with bf16 scale/bias (as PyTorch's bf16 modules hold them; with fp32 ones
cuDNN 9.19 offers only its generic norm engine, 4.6x slower: bench/probes/norm_phase_probe.cc); attention as [B,H,S,D] (row-major).

The transformer block (BLOCK_SHAPES, block_specs) is a chain of seven Kiln graphs; see block_specs.
"""
import math

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8_e4m3": 1}

# ResNet-50's conv layers at batch 32 (fp16, NHWC): (c, h, w, k, r, s, pad, stride)
RESNET50_CONVS = [
    (64, 56, 56, 64, 3, 3, 1, 1),
    (256, 56, 56, 64, 1, 1, 0, 1),
    (256, 14, 14, 256, 3, 3, 1, 1),
    (512, 7, 7, 512, 3, 3, 1, 1),
]
# Transformer GEMMs (bf16): (m, k, n); the skinny 16-token decode shape first. Few shapes per family: the
# suite must fit the GPU machine's minutes, and torch.compile's max-autotune spends tens of seconds on each.
MM_GELU_SHAPES = [(16, 8192, 8192), (2048, 4096, 16384), (8192, 8192, 8192)]
MM_PLAIN_SHAPES = [(8192, 8192, 8192)]
MM_AMAX_SHAPES = [(16, 8192, 8192), (8192, 8192, 8192)]
FP8_SHAPES = [(16, 8192, 8192), (8192, 8192, 8192)]
SDPA_SHAPES = [(4, 32, 4096, 128), (16, 16, 1024, 64)]
# Attention with a diagonal band (issue 36), Llama-3.1-8B heads (32 query heads over 8 KV heads, D 128), bf16:
# (name, b, h, hk, sq, skv, d, left_bound, bottom_right); every case causal. A Mistral-style sliding window of
# 4096 keys; a chunk of a chunked prefill and a decode step, both aligned bottom-right (dense KV).
SDPA_BAND_SHAPES = [("window4096", 1, 32, 8, 16384, 16384, 128, 4096, False),
                    ("window4096", 4, 32, 8, 8192, 8192, 128, 4096, False),
                    ("chunk2048_ctx16k", 1, 32, 8, 2048, 16384, 128, None, True),
                    ("decode_ctx8k", 64, 32, 8, 1, 8192, 128, None, True)]


def band_pairs(sq: int, skv: int, left, bottom_right: bool) -> int:
    """(query, key) pairs a causal band scores: query i sees keys diag - left < j <= diag (diag = i, or
    i + skv - sq bottom-right)."""
    shift = skv - sq if bottom_right else 0
    total = 0
    for i in range(sq):
        diag = i + shift
        first = max(0, diag - left + 1) if left else 0
        total += max(0, min(skv, diag + 1) - first)
    return total
NORM_SHAPES = [(16384, 8192), (65536, 1024)]
BLOCK_SHAPES = [(1, 16), (1, 2048)]  # (batch, tokens) at hidden 4096, 32 heads, MLP 4x


def _mm_case(family, m, k, n, dtype, out_dtype=None):
    b = DTYPE_BYTES[dtype]
    ob = DTYPE_BYTES[out_dtype or dtype]
    extra = 0
    if family == "matmul_bias_gelu":
        extra = n * b
    if family in ("matmul_amax", "fp8_recipe"):
        extra = 4
    return {
        "family": family,
        "name": f"{m}x{k}x{n}",
        "id": f"{family}_{m}x{k}x{n}",
        "dtype": dtype,
        "params": {"m": m, "k": k, "n": n},
        "flops": 2.0 * m * n * k,
        "min_bytes": float(m * k * b + k * n * b + m * n * ob + extra),
    }


def cases():
    out = []
    for (c, h, w, k, r, s, pad, stride) in RESNET50_CONVS:
        n = 32
        p = (h + 2 * pad - r) // stride + 1
        q = (w + 2 * pad - s) // stride + 1
        out.append({
            "family": "conv_bias_relu",
            "name": f"{r}x{s} {c}->{k} {h}x{w} n{n}",
            "id": f"conv_bias_relu_{r}x{s}_{c}to{k}_{h}_n{n}",
            "dtype": "fp16",
            "params": {"n": n, "c": c, "h": h, "w": w, "k": k, "r": r, "s": s, "pad": pad, "stride": stride},
            "flops": 2.0 * n * k * c * r * s * p * q,
            "min_bytes": 2.0 * (n * c * h * w + k * c * r * s + k + n * k * p * q),
        })
    for (m, k, n) in MM_GELU_SHAPES:
        out.append(_mm_case("matmul_bias_gelu", m, k, n, "bf16"))
    for (m, k, n) in MM_PLAIN_SHAPES:
        out.append(_mm_case("matmul", m, k, n, "bf16"))
    for (m, k, n) in MM_AMAX_SHAPES:
        out.append(_mm_case("matmul_amax", m, k, n, "bf16"))
    for (m, k, n) in FP8_SHAPES:
        out.append(_mm_case("fp8_recipe", m, k, n, "fp8_e4m3", out_dtype="bf16"))
    for (b, h, s, d) in SDPA_SHAPES:
        for causal in (False, True):
            fl = 4.0 * b * h * s * s * d
            out.append({
                "family": "sdpa",
                "name": f"B{b} H{h} S{s} D{d}{' causal' if causal else ''}",
                "id": f"sdpa_b{b}_h{h}_s{s}_d{d}{'_causal' if causal else ''}",
                "dtype": "bf16",
                "params": {"b": b, "h": h, "s": s, "d": d, "causal": causal},
                "flops": fl / 2 if causal else fl,
                "min_bytes": 2.0 * 4 * b * h * s * d,
            })
    for (name, b, h, hk, sq, skv, d, left, br) in SDPA_BAND_SHAPES:
        out.append({
            "family": "sdpa_band",
            "name": f"{name} B{b} Sq{sq} Skv{skv}",
            "id": f"sdpa_band_{name}_b{b}_sq{sq}_skv{skv}",
            "dtype": "bf16",
            "params": {"b": b, "h": h, "hk": hk, "sq": sq, "skv": skv, "d": d, "left_bound": left,
                       "bottom_right": br},
            "flops": 4.0 * b * h * d * band_pairs(sq, skv, left, br),
            "min_bytes": 2.0 * (2 * b * h * sq * d + 2 * b * hk * skv * d),
        })
    for fam in ("layer_norm", "rms_norm"):
        for (t, hid) in NORM_SHAPES:
            params_bytes = (2 if fam == "layer_norm" else 1) * hid * 2  # bf16 scale (and bias)
            out.append({
                "family": fam,
                "name": f"{t}x{hid}",
                "id": f"{fam}_{t}x{hid}",
                "dtype": "bf16",
                "params": {"tokens": t, "hidden": hid},
                "flops": 0.0,
                "min_bytes": float(2 * 2 * t * hid + params_bytes),
            })
    for c in out:
        c["spec"] = kiln_spec(c)
    return out


def _base(name, desc, io):
    return {"name": name, "description": desc, "io_dtype": io, "intermediate_dtype": "fp32", "compute_dtype": "fp32"}


def kiln_spec(c):
    """The Kiln JSON spec (a dict) for one case."""
    f, p = c["family"], c["params"]
    if f == "conv_bias_relu":
        g = _base(c["id"], "ResNet-50 conv + bias + ReLU (fp16, NHWC)", "fp16")
        g["tensors"] = {
            "x": {"dims": [p["n"], p["c"], p["h"], p["w"]], "layout": "NHWC"},
            "w": {"dims": [p["k"], p["c"], p["r"], p["s"]], "layout": "NHWC"},
            "bias": {"dims": [1, p["k"], 1, 1], "layout": "NHWC"},
            "y": {"layout": "NHWC"},
        }
        g["nodes"] = [
            {"name": "conv", "op": "conv_fprop", "inputs": ["x", "w"], "outputs": ["c"],
             "padding": [p["pad"]] * 2, "stride": [p["stride"]] * 2, "dilation": [1, 1]},
            {"name": "add_bias", "op": "bias_add", "inputs": ["c", "bias"], "outputs": ["b"]},
            {"name": "relu", "op": "relu", "inputs": ["b"], "outputs": ["y"]},
        ]
        g["outputs"] = ["y"]
        return g
    if f in ("matmul", "matmul_bias_gelu", "matmul_amax", "fp8_recipe"):
        m, k, n = p["m"], p["k"], p["n"]
        io = "bf16" if f != "fp8_recipe" else "bf16"
        g = _base(c["id"], f"{f} {m}x{k}x{n}", io)
        g["tensors"] = {"a": {"dims": [1, m, k]}, "b": {"dims": [1, k, n]}}
        if f == "fp8_recipe":
            g["description"] = ("FP8 recipe: e4m3 inputs, bf16 GEMM output, its AMAX and the next scale 448/amax")
            g["tensors"]["a"]["dtype"] = "fp8_e4m3"
            # B column-major (K contiguous), as torch._scaled_mm takes it: Hopper's FP8 tensor-core MMA reads
            # both operands K-major, so a row-major B costs a transpose or a slow engine.
            g["tensors"]["b"] = {"dims": [1, k, n], "strides": [k * n, 1, k], "dtype": "fp8_e4m3"}
            g["tensors"]["fp8_max"] = {"dims": [1, 1, 1], "dtype": "fp32", "value": 448.0}
            g["tensors"]["scale"] = {"dtype": "fp32"}
        g["nodes"] = [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["y" if f != "matmul_bias_gelu" else "mm_out"]}]
        if f == "matmul_bias_gelu":
            g["tensors"]["bias"] = {"dims": [1, 1, n]}
            g["nodes"] += [
                {"name": "add_bias", "op": "bias_add", "inputs": ["mm_out", "bias"], "outputs": ["biased"]},
                {"name": "gelu", "op": "gelu_erf", "inputs": ["biased"], "outputs": ["y"]},
            ]
            g["outputs"] = ["y"]
        elif f == "matmul_amax":
            g["tensors"]["amax"] = {"dims": [1, 1, 1], "dtype": "fp32"}
            g["nodes"].append({"name": "amax", "op": "reduce_amax", "inputs": ["y"], "outputs": ["amax"], "axes": [0, 1, 2]})
            g["outputs"] = ["y", "amax"]
        elif f == "fp8_recipe":
            g["nodes"] += [
                {"name": "amax", "op": "reduce_amax", "inputs": ["y"], "outputs": ["amax"], "axes": [0, 1, 2]},
                {"name": "fp8_scale", "op": "div", "inputs": ["fp8_max", "amax"], "outputs": ["scale"]},
            ]
            g["outputs"] = ["y", "scale"]
        else:
            g["outputs"] = ["y"]
        return g
    if f == "sdpa":
        b, h, s, d = p["b"], p["h"], p["s"], p["d"]
        g = _base(c["id"], f"attention forward {c['name']} (bf16)", "bf16")
        g["tensors"] = {t: {"dims": [b, h, s, d]} for t in ("q", "k", "v")}
        g["nodes"] = [{"name": "attn", "op": "sdpa", "inputs": ["q", "k", "v"], "outputs": ["o"],
                       "causal": p["causal"], "attn_scale": 1.0 / math.sqrt(d)}]
        g["outputs"] = ["o"]
        return g
    if f == "sdpa_band":
        g = _base(c["id"], f"attention forward with a band: {c['name']} (bf16)", "bf16")
        g["tensors"] = {"q": {"dims": [p["b"], p["h"], p["sq"], p["d"]]},
                        "k": {"dims": [p["b"], p["hk"], p["skv"], p["d"]]},
                        "v": {"dims": [p["b"], p["hk"], p["skv"], p["d"]]}}
        node = {"name": "attn", "op": "sdpa", "inputs": ["q", "k", "v"], "outputs": ["o"], "causal": True,
                "attn_scale": 1.0 / math.sqrt(p["d"])}
        if p["left_bound"]:
            node["left_bound"] = p["left_bound"]
        if p["bottom_right"]:
            node["diagonal_alignment"] = "bottom_right"
        g["nodes"] = [node]
        g["outputs"] = ["o"]
        return g
    if f in ("layer_norm", "rms_norm"):
        t, hid = p["tokens"], p["hidden"]
        g = _base(c["id"], f"{f} {t}x{hid} (bf16)", "bf16")
        g["tensors"] = {
            "x": {"dims": [t, hid, 1, 1], "layout": "NCHW"},
            "gamma": {"dims": [1, hid, 1, 1], "layout": "NCHW"},
        }
        ins = ["x", "gamma"]
        if f == "layer_norm":
            g["tensors"]["beta"] = {"dims": [1, hid, 1, 1], "layout": "NCHW"}
            ins.append("beta")
        g["nodes"] = [{"name": "norm", "op": f, "inputs": ins, "outputs": ["y"], "epsilon": 1e-5}]
        g["outputs"] = ["y"]
        return g
    raise ValueError(f"unknown family {f}")


HIDDEN, HEADS, MLP = 4096, 32, 4 * 4096


def block_specs(batch, tokens):
    """The bf16 transformer block (pre-norm) as seven Kiln graphs, in order, with the buffers they share.

    Returns (buffers, steps): buffers maps a name to its size in elements (bf16 unless named *_f32);
    each step is {"spec": dict, "bind": {tensor: [buffer, element offset]}}. Q, K and V are strided views
    of the QKV projection's output [T, 3*hidden] (no copy), and attention writes [T, heads, dim] so the
    output projection reads it as [T, hidden].
        h1 = LN1(x); qkv = h1 Wqkv; o = SDPA(q, k, v) causal; x2 = o Wo + x; h2 = LN2(x2);
        u = GELU(h2 W1 + b1); out = u W2 + x2
    """
    t = batch * tokens
    hd = HIDDEN // HEADS
    bufs = {"x": t * HIDDEN, "h1": t * HIDDEN, "qkv": t * 3 * HIDDEN, "o": t * HIDDEN, "x2": t * HIDDEN,
            "h2": t * HIDDEN, "u": t * MLP, "out": t * HIDDEN,
            "ln1_g": HIDDEN, "ln1_b": HIDDEN, "ln2_g": HIDDEN, "ln2_b": HIDDEN,
            "wqkv": HIDDEN * 3 * HIDDEN, "wo": HIDDEN * HIDDEN, "w1": HIDDEN * MLP, "b1": MLP, "w2": MLP * HIDDEN}
    steps = []

    def ln(name, src, g, b, dst):
        spec = _base(f"block_{name}_t{t}", f"transformer block {name} at {t} tokens", "bf16")
        spec["tensors"] = {"x": {"dims": [t, HIDDEN, 1, 1], "layout": "NCHW"},
                           "gamma": {"dims": [1, HIDDEN, 1, 1], "layout": "NCHW"},
                           "beta": {"dims": [1, HIDDEN, 1, 1], "layout": "NCHW"}}
        spec["nodes"] = [{"name": "norm", "op": "layer_norm", "inputs": ["x", "gamma", "beta"], "outputs": ["y"], "epsilon": 1e-5}]
        spec["outputs"] = ["y"]
        steps.append({"spec": spec, "bind": {"x": [src, 0], "gamma": [g, 0], "beta": [b, 0], "y": [dst, 0]}})

    def mm(name, src, k, w, n, dst, bias=None, gelu=False, residual=None):
        spec = _base(f"block_{name}_t{t}", f"transformer block {name} at {t} tokens", "bf16")
        spec["tensors"] = {"a": {"dims": [1, t, k]}, "b": {"dims": [1, k, n]}}
        nodes = [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["y" if not (bias or residual) else "mm_out"]}]
        bind = {"a": [src, 0], "b": [w, 0], "y": [dst, 0]}
        if bias:
            spec["tensors"]["bias"] = {"dims": [1, 1, n]}
            nodes.append({"name": "add_bias", "op": "bias_add", "inputs": ["mm_out", "bias"], "outputs": ["biased"]})
            nodes.append({"name": "gelu", "op": "gelu_erf", "inputs": ["biased"], "outputs": ["y"]})
            bind["bias"] = [bias, 0]
        if residual:
            spec["tensors"]["res"] = {"dims": [1, t, n]}
            nodes.append({"name": "add_res", "op": "add", "inputs": ["mm_out", "res"], "outputs": ["y"]})
            bind["res"] = [residual, 0]
        spec["nodes"] = nodes
        spec["outputs"] = ["y"]
        steps.append({"spec": spec, "bind": bind})

    ln("ln1", "x", "ln1_g", "ln1_b", "h1")
    mm("qkv", "h1", HIDDEN, "wqkv", 3 * HIDDEN, "qkv")
    # attention: q/k/v are [B, H, S, D] views of qkv [B*S, 3*hidden]; o is written as [B, S, H, D]
    row = 3 * HIDDEN
    qkv_strides = [tokens * row, hd, row, 1]
    spec = _base(f"block_attn_t{t}", f"transformer block attention at {t} tokens (causal)", "bf16")
    spec["tensors"] = {
        "q": {"dims": [batch, HEADS, tokens, hd], "strides": qkv_strides},
        "k": {"dims": [batch, HEADS, tokens, hd], "strides": qkv_strides},
        "v": {"dims": [batch, HEADS, tokens, hd], "strides": qkv_strides},
        "o": {"dims": [batch, HEADS, tokens, hd], "strides": [tokens * HIDDEN, hd, HIDDEN, 1]},
    }
    spec["nodes"] = [{"name": "attn", "op": "sdpa", "inputs": ["q", "k", "v"], "outputs": ["o"],
                      "causal": True, "attn_scale": 1.0 / math.sqrt(hd)}]
    spec["outputs"] = ["o"]
    steps.append({"spec": spec, "bind": {"q": ["qkv", 0], "k": ["qkv", HIDDEN], "v": ["qkv", 2 * HIDDEN], "o": ["o", 0]}})
    mm("out_proj", "o", HIDDEN, "wo", HIDDEN, "x2", residual="x")
    ln("ln2", "x2", "ln2_g", "ln2_b", "h2")
    mm("mlp_up", "h2", HIDDEN, "w1", MLP, "u", bias="b1", gelu=True)
    mm("mlp_down", "u", MLP, "w2", HIDDEN, "out", residual="x2")
    return bufs, steps


def block_flops(batch, tokens):
    t = batch * tokens
    gemm = 2.0 * t * HIDDEN * (3 * HIDDEN + HIDDEN + 2 * MLP)
    attn = 4.0 * batch * HEADS * tokens * tokens * (HIDDEN // HEADS) / 2  # causal
    return gemm + attn


def block_weight_bytes():
    return 2.0 * (HIDDEN * 3 * HIDDEN + HIDDEN * HIDDEN + 2 * HIDDEN * MLP + MLP)


if __name__ == "__main__":
    import json
    import sys
    for c in cases():
        print(c["family"], c["name"], c["id"], f"{c['flops']/1e9:.1f} GFLOP", f"{c['min_bytes']/1e6:.1f} MB")
    bufs, steps = block_specs(1, 16)
    print(len(steps), "block steps;", json.dumps(steps[2]["spec"])[:200], file=sys.stderr)
