"""The graph in PyTorch: each op as a PyTorch user writes it, and each tensor's magnitude by the rules of
src/validate/reference_math.h and ops/<family>_math.h (the accumulation bound, docs/numerics.md).

Nodes come from the normalized graph (normalized.py) in Kiln's topological order, with every attribute
resolved by Kiln: nothing here infers a dim or fills a default.
"""

import math

import torch
import torch.nn.functional as F

from .tensors import DTYPES, round_to_dtype

CONV = {1: (F.conv1d, torch.nn.grad.conv1d_input, torch.nn.grad.conv1d_weight),
        2: (F.conv2d, torch.nn.grad.conv2d_input, torch.nn.grad.conv2d_weight),
        3: (F.conv3d, torch.nn.grad.conv3d_input, torch.nn.grad.conv3d_weight)}
BINARY = {"add", "sub", "mul", "div", "min", "max", "scale", "bias_add"}
POINTWISE = {"add": torch.add, "bias_add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
             "scale": lambda x, s: x * s.reshape(()),
             "min": torch.fmin, "max": torch.fmax,  # as pointwise_value's fmin/fmax: a NaN loses to a number
             "relu": F.relu, "gelu_erf": lambda x: F.gelu(x, approximate="none"),
             "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "sigmoid": torch.sigmoid,
             "tanh": torch.tanh, "exp": torch.exp, "abs": torch.abs, "identity": lambda x: x}


def pad_spatial(x, pre, post):
    """Zero padding of the spatial dims, pre/post per dim (F.pad lists the last dim first)."""
    pads = []
    for p0, p1 in reversed(list(zip(pre, post))):
        pads += [p0, p1]
    return F.pad(x, pads)


def run_conv(n, a, b, out_dims):
    at = n.attrs
    pre, post, stride, dilation, groups = at["pre_padding"], at["post_padding"], at["stride"], at["dilation"], at["groups"]
    sp = len(out_dims) - 2
    fprop, data_grad, weight_grad = CONV[sp]
    sym = pre == post
    pad = pre if sym else [0] * sp
    if n.kind == "conv_fprop":
        x = a if sym else pad_spatial(a, pre, post)
        return fprop(x, b, None, stride, pad, dilation, groups)
    if n.kind == "conv_dgrad":  # dy, w -> dx: the gradient of conv_fprop with respect to its input
        size = list(out_dims) if sym else out_dims[:2] + [d + p0 + p1 for d, p0, p1 in zip(out_dims[2:], pre, post)]
        dx = data_grad(size, b, a, stride, pad, dilation, groups)
        if not sym:
            dx = dx[(slice(None), slice(None)) + tuple(slice(p, p + d) for p, d in zip(pre, out_dims[2:]))]
        return dx
    x = a if sym else pad_spatial(a, pre, post)  # x, dy -> dw
    return weight_grad(x, list(out_dims), b, stride, pad, dilation, groups)


def band_keep(n, sq, skv, device, lengths=None):
    """The keys each query attends to (normalized graph: i + shift - left_bound < j <= i + shift + right_bound), as a
    [sq, skv] bool mask; None without a band. With a padding mask's `lengths` (seq_len_q, seq_len_kv: [B] each) a
    [B, 1, sq, skv] mask: keys past an entry's length masked, its padded queries seeing none, and a bottom-right
    diagonal at i + seq_len_kv - seq_len_q."""
    left, right = n.attrs.get("left_bound"), n.attrs.get("right_bound")
    if lengths is not None:
        lq = lengths[0].reshape(-1).to(torch.int64).clamp(0, sq)  # as Kiln's references: within the extents
        lkv = lengths[1].reshape(-1).to(torch.int64).clamp(0, skv)
        i = torch.arange(sq, device=device)[None, :, None]
        j = torch.arange(skv, device=device)[None, None, :]
        shift = (lkv - lq)[:, None, None] if n.attrs.get("diagonal_alignment") == "bottom_right" else 0
        keep = (j < lkv[:, None, None]) & (i < lq[:, None, None])
        if right is not None:
            keep &= j <= i + shift + right
        if left is not None:
            keep &= j > i + shift - left
        return keep[:, None]
    if left is None and right is None:
        return None
    diag = torch.arange(sq, device=device)[:, None] + n.attrs.get("diagonal_shift", 0)
    j = torch.arange(skv, device=device)[None, :]
    keep = torch.ones(sq, skv, dtype=torch.bool, device=device)
    if right is not None:
        keep &= j <= diag + right
    if left is not None:
        keep &= j > diag - left
    return keep


def paged_dense(cache, table):
    """A paged cache [blocks, Hk, block_size, D] read through its page table [B, 1, pages, 1] as the dense
    [B, Hk, pages * block_size, D] it stands for."""
    b, pages = table.shape[0], table.shape[2]
    idx = table.reshape(b, pages).to(torch.int64).clamp(0, cache.shape[0] - 1)
    g = cache[idx]  # [B, pages, Hk, block_size, D]
    return g.permute(0, 2, 1, 3, 4).reshape(b, cache.shape[1], pages * cache.shape[2], cache.shape[3])


def sdpa_inputs(n, ins):
    """q, k, v (dense: paged caches read through their page tables), the bias (or None) and the padding mask's
    lengths (or None) by their roles."""
    by = dict(zip(n.input_roles, ins))
    if "ragged_q" in by:  # the offsets follow from the lengths in Kiln's own checks; torch_check does not draw them
        raise NotImplementedError("ragged (THD) attention is not checked by torch_check yet")
    lengths = (by["seq_len_q"], by["seq_len_kv"]) if "seq_len_q" in by else None
    k, v = by["k"], by["v"]
    if "page_table_k" in by and torch.is_tensor(k):
        k, v = paged_dense(k, by["page_table_k"]), paged_dense(v, by["page_table_v"])
    return by["q"], k, v, by.get("bias"), lengths


def run_sdpa(n, q, k, v, bias=None, lengths=None):
    causal, scale = n.attrs["causal"], n.attrs["attn_scale"]
    keep = band_keep(n, q.shape[2], k.shape[2], q.device, lengths)
    if keep is not None or bias is not None:  # a band (causal included), a bias, lengths: the mask itself
        rep = q.shape[1] // k.shape[1]
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        mask = keep
        if bias is not None:  # an additive float mask: the bias, and -inf where the band masks
            mask = bias if keep is None else bias.masked_fill(~keep, -math.inf)
        if lengths is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        # A row that sees no key (a padded query) is zeros, as Kiln's references write it (torch would give NaN).
        empty = ~keep.any(dim=-1, keepdim=True)
        if mask.dtype == torch.bool:
            mask = mask | empty
        else:
            mask = mask.masked_fill(empty, 0.0)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        return o.masked_fill(empty, 0.0)
    if k.shape[1] != q.shape[1]:
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)
        except TypeError:  # torch < 2.5: query head h reads key head h // (H / Hk)
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def run_node(n, ins, out_dims):
    """One node with PyTorch, in the dtype of its (float) inputs."""
    if n.kind.startswith("conv_"):
        return run_conv(n, ins[0], ins[1], out_dims)
    if n.kind == "matmul":
        return torch.matmul(ins[0], ins[1])
    if n.kind == "pointwise":
        return POINTWISE[n.mode](*ins[:2]) if n.mode in BINARY else POINTWISE[n.mode](ins[0])
    if n.kind == "reduction":
        x, axes = ins[0], n.attrs["axes"]
        if n.mode == "sum":
            return x.sum(dim=axes, keepdim=True)
        if n.mode == "max":
            return x.amax(dim=axes, keepdim=True)
        if n.mode == "min":
            return x.amin(dim=axes, keepdim=True)
        return x.abs().amax(dim=axes, keepdim=True)
    if n.kind in ("layer_norm", "rms_norm"):
        x, eps = ins[0], n.attrs["epsilon"]
        shape = list(x.shape[1:])  # normalized over every axis but the first
        w = ins[1].reshape(shape)
        if n.kind == "layer_norm":
            return F.layer_norm(x, shape, w, ins[2].reshape(shape), eps)
        if hasattr(F, "rms_norm"):
            y = F.rms_norm(x, shape, w, eps)
        else:
            dims = list(range(1, x.dim()))
            y = x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps) * w
        return y + ins[2].reshape(shape) if len(ins) > 2 else y
    return run_sdpa(n, *sdpa_inputs(n, ins))


def pointwise_magnitude(mode, va, vb, vy, ba, bb, ea, eb):
    """pointwise_magnitude (src/validate/ops/pointwise_math.h), elementwise over broadcast tensors."""
    if mode in ("add", "sub", "bias_add"):
        return ba + bb
    if mode in ("min", "max"):
        return torch.fmax(ba, bb)
    if mode in ("mul", "scale"):
        return (2.0 if ea and eb else 1.0) * ba * bb
    if mode == "div":
        inv = 1.0 / vb.abs()
        return ba * inv * (1.0 + (bb * inv if eb else 0.0))
    if mode in ("relu", "tanh", "abs", "identity"):
        return ba
    if mode in ("gelu_erf", "gelu_tanh"):
        return 1.13 * ba
    if mode == "silu":
        return 1.1 * ba
    if mode == "sigmoid":
        return torch.fmax(vy.abs(), 0.25 * ba)
    return vy.abs() * torch.clamp(ba, min=1.0)  # exp


def norm_magnitude(n, x, s, bx, bs, bb, ex, es, eb, vy):
    """norm_magnitude / norm_dterm_part (ops/norm_math.h) with the row statistics of host_reference.cc."""
    layer, eps = n.kind == "layer_norm", n.attrs["epsilon"]
    dims = list(range(1, x.dim()))
    shape = list(x.shape[1:])
    mean = x.mean(dim=dims, keepdim=True) if layer else torch.zeros_like(x[:1])
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)  # mean(x^2) for RMS norm
    inv = 1.0 / torch.sqrt(var + eps)
    bm = bx.mean(dim=dims, keepdim=True)
    mean_err = (1.0 + (1.0 if ex else 0.0)) * bm if layer else torch.zeros_like(bm)
    dterm = ((x - mean).abs() * ((bx if ex else 0.0) + mean_err)).mean(dim=dims, keepdim=True)
    xhat = (x - mean) * inv
    vs = s.reshape(shape)
    e = vs.abs() * inv * ((bx if ex else 0.0) + mean_err) + 0.5 * (vs * xhat).abs() * (var + 2.0 * dterm) / (var + eps)
    if es:
        e = e + bs.reshape(shape) * xhat.abs()
    if eb:
        e = e + bb.reshape(shape)
    return torch.fmax(vy.abs(), e)


def sdpa_magnitude(n, q, k, v, bq, bk, bv, eq, ek, ev, o, bias=None, bbias=None, ebias=0.0, lengths=None):
    """sdpa_magnitude_term summed over keys (host_reference.cc sdpa_magnitude_of), batched:
    B_o = max(|o|, sum_j p_j ((Bv_j + |o|) S_j + (2 + Ev) Bv_j)), S_j = (1 + Eq + Ek) scale sum_d Bq_d Bk_jd
    (+ (1 + Ebias) Bbias_j with a bias)."""
    scale = n.attrs["attn_scale"]
    rep = q.shape[1] // k.shape[1]
    if rep > 1:  # query head h reads key head h // (H / Hk)
        k, v, bk, bv = (t.repeat_interleave(rep, dim=1) for t in (k, v, bk, bv))
    scores = scale * torch.matmul(q, k.transpose(-1, -2))
    if bias is not None:
        scores = scores + bias
    keep = band_keep(n, q.shape[2], k.shape[2], q.device, lengths)
    if keep is None and n.attrs["causal"]:  # key j > query i is masked (top-left; a normalized graph without bounds)
        keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    if keep is not None:
        scores = scores.masked_fill(~keep, -math.inf)
    p = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)  # a padded query's row: no key, no term
    s_mag = (1.0 + eq + ek) * abs(scale) * torch.matmul(bq, bk.transpose(-1, -2))
    if bbias is not None:
        s_mag = s_mag + (1.0 + ebias) * bbias
    ps = p * s_mag
    acc = torch.matmul(ps, bv) + o.abs() * ps.sum(dim=-1, keepdim=True) + (2.0 + ev) * torch.matmul(p, bv)
    return torch.fmax(o.abs(), acc)


def node_magnitude(n, ins, bs, es, y, out_dims):
    """The magnitude of node n's output (host_reference.cc evaluate, magnitude pass): B >= |y| and the
    accumulation error of y <= c * B, from the operands' values, magnitudes and whether they carry error."""
    if n.kind.startswith("conv_") or n.kind == "matmul":
        factor = 1.0 + es[0] + es[1]  # contraction_factor
        return factor * (run_conv(n, bs[0], bs[1], out_dims) if n.kind != "matmul" else torch.matmul(bs[0], bs[1]))
    if n.kind == "pointwise":
        zero = torch.zeros((), dtype=ins[0].dtype, device=ins[0].device)
        vb, bb = (ins[1], bs[1]) if len(ins) > 1 else (zero, zero)
        if n.mode == "scale":
            vb, bb = vb.reshape(()), bb.reshape(())
        return pointwise_magnitude(n.mode, ins[0], vb, y, bs[0], bb, es[0], len(es) > 1 and es[1]).expand(out_dims)
    if n.kind == "reduction":  # a sum accumulates; max, min and amax pick one element
        if n.mode == "sum":
            return (1.0 + es[0]) * bs[0].sum(dim=n.attrs["axes"], keepdim=True)
        return bs[0].amax(dim=n.attrs["axes"], keepdim=True)
    if n.kind in ("layer_norm", "rms_norm"):
        bias = len(ins) > 2
        return norm_magnitude(n, ins[0], ins[1], bs[0], bs[1], bs[2] if bias else None, es[0], es[1], bias and es[2], y)
    q, k, v, bias, lengths = sdpa_inputs(n, ins)
    if "page_table_k" in n.input_roles:  # magnitudes read through the value tables, not the tables' magnitudes
        bs = [x if r.startswith("page_table") else b for r, x, b in zip(n.input_roles, ins, bs)]
    bq, bk, bv, bb, _ = sdpa_inputs(n, bs)
    eq, ek, ev, eb, _ = sdpa_inputs(n, es)
    return sdpa_magnitude(n, q, k, v, bq, bk, bv, eq, ek, ev, y, bias, bb, eb or 0.0, lengths)


def run_graph_torch(g, inputs, device, compute, magnitudes=False):
    """Every node in Kiln's topological order on `device` in `compute` (torch.float32 or float64); every
    tensor a node writes is rounded to its dtype, as the GPU stores it. Returns ({output index: float64
    values}, {output index: float64 magnitudes rounded to fp32, as ReferenceOutputs::magnitudes} or None)."""
    vals, mags, carries = {}, {}, {}

    def holder(t):  # integers are kept in float64 (identity may cast them); floats in the compute dtype
        return torch.float64 if DTYPES[g.tensors[t].dtype].is_int else compute

    for t in g.tensors:
        if not t.is_input:
            continue
        if t.by_value:
            v = round_to_dtype(torch.full(t.dims, t.value, dtype=torch.float64), DTYPES[t.dtype])
        else:
            v = inputs[t.index]
        vals[t.index] = v.to(device=device, dtype=holder(t.index))
        if magnitudes:  # a graph input: B = |x|, no accumulation error
            mags[t.index] = vals[t.index].abs().to(compute)
            carries[t.index] = False
    for n in g.nodes:
        o = n.output
        dims = g.tensors[o].dims
        ins = [vals[t] if n.mode == "identity" else vals[t].to(compute) for t in n.inputs]
        y = run_node(n, ins, dims)
        if list(y.shape) != list(dims):
            raise RuntimeError(f"{n.label()}: PyTorch gave shape {list(y.shape)}, Kiln infers {dims}")
        if magnitudes:  # from the unrounded result, as the host reference does
            fvals = [vals[t].to(compute) for t in n.inputs]
            mags[o] = node_magnitude(n, fvals, [mags[t] for t in n.inputs], [carries[t] for t in n.inputs],
                                     y.to(compute), dims).contiguous()
            carries[o] = True
        vals[o] = round_to_dtype(y, DTYPES[g.tensors[o].dtype]).to(holder(o)).contiguous()
    outs = [o.tensor for o in g.outputs]
    out_vals = {t: vals[t].to(torch.float64) for t in outs}
    if not magnitudes:
        return out_vals, None
    return out_vals, {t: mags[t].to(torch.float32).to(torch.float64) for t in outs}
