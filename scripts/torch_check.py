#!/usr/bin/env python3
"""Cross-check Kiln's outputs against PyTorch, spec by spec, with Kiln's own error measures.

    python scripts/torch_check.py --kiln build-gpu/kiln --out OUT_DIR examples/*.json

For each spec: parse it (docs/spec.md) and infer dims, layouts, strides and dtypes as Kiln does; draw
seeded random inputs (torch.Generator, ranges as kiln::make_random_inputs); write them as <tensor>.bin
in Kiln's raw encoding (HostTensor::encode); run `kiln run SPEC --inputs DIR --save-outputs DIR`; read the
outputs back (HostTensor::decode); compute the same graph with PyTorch from the same inputs (fp32 math by
default, TF32 off); round each written tensor to its dtype; compare with kiln::measure_error and
kiln::default_tolerance's numbers. One row per (spec, output); the whole run as JSON in
OUT_DIR/torch_check.json. Exit 0: all Passed; 1: something Incorrect or Failed; 2: bad usage.

The tolerances are kiln::check_outputs' with magnitudes (the accumulation bound, docs/numerics.md): the
PyTorch pass also carries each tensor's magnitude by the rules of src/validate/reference_math.h.
--tolerance legacy uses check_outputs from values alone instead.

--skip-kiln compares the PyTorch interpreter in fp32 against itself in fp64 (a self-test that needs no
kiln binary and, with --device cpu, no GPU). Needs torch and the standard library only.
"""

import argparse
import heapq
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch alone is enough here
try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - reported as bad usage
    print("torch_check.py needs PyTorch (e.g. /opt/torch/.venv/bin/python)", file=sys.stderr)
    sys.exit(2)


class SpecError(Exception):
    """The spec cannot be read or inferred (what `kiln validate` would refuse)."""


# ---- Dtypes and Kiln's raw encoding (src/validate/host_tensor.cc) ---------------------------------

class FloatFormat:
    """A binary float format as host_tensor.cc's FloatFormat: `ieee` formats reserve the all-ones
    exponent for inf/NaN; e4m3fn uses it for normals except mantissa all-ones (NaN)."""

    def __init__(self, ebits, mbits, ieee, saturate, nan_bits):
        self.ebits, self.mbits, self.ieee, self.saturate, self.nan_bits = ebits, mbits, ieee, saturate, nan_bits
        self.bias = (1 << (ebits - 1)) - 1
        self.max_ef = (1 << ebits) - 2 if ieee else (1 << ebits) - 1
        self.max_mant = (1 << mbits) - 1 if ieee else (1 << mbits) - 2
        self.max_finite = (self.max_ef << mbits) | self.max_mant
        self.inf_bits = ((1 << ebits) - 1) << mbits if ieee else self.max_finite
        self.overflow = self.max_finite if saturate else self.inf_bits


class DType:
    def __init__(self, name, size, fmt=None, int_range=None):
        self.name, self.size, self.fmt, self.int_range = name, size, fmt, int_range

    @property
    def is_int(self):
        return self.int_range is not None

    def __repr__(self):
        return self.name


DTYPES = {
    "fp32": DType("fp32", 4),
    "fp16": DType("fp16", 2, FloatFormat(5, 10, True, False, 0x7E00)),
    "bf16": DType("bf16", 2, FloatFormat(8, 7, True, False, 0x7FC0)),
    "fp8_e4m3": DType("fp8_e4m3", 1, FloatFormat(4, 3, False, True, 0x7F)),
    "fp8_e5m2": DType("fp8_e5m2", 1, FloatFormat(5, 2, True, False, 0x7E)),
    "int8": DType("int8", 1, int_range=(-128.0, 127.0)),
    "int32": DType("int32", 4, int_range=(-2147483648.0, 2147483647.0)),
    # Doubles above 2^63 - 1024 are not int64s: round_to_dtype clamps to the largest double below 2^63.
    "int64": DType("int64", 8, int_range=(-9223372036854775808.0, 9223372036854774784.0)),
}
DTYPE_ALIASES = {"float": "fp32", "float32": "fp32", "half": "fp16", "float16": "fp16", "bfloat16": "bf16"}


def parse_dtype(name, where):
    """kiln::parse_dtype (src/graph/types.cc)."""
    if not isinstance(name, str):
        raise SpecError(f"{where}: expected a string, got {json_type(name)}")
    key = DTYPE_ALIASES.get(name, name)
    if key not in DTYPES:
        raise SpecError(f"{where}: unknown dtype '{name}' (expected fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int8, "
                        "int32 or int64)")
    return DTYPES[key]


def pow2(n):
    """2.0**n for an int64 tensor n in [-1022, 1023], built from the exponent bits (exact on any device)."""
    return ((n + 1023) << 52).view(torch.float64)


def encode_float(x, f):
    """encode_float (host_tensor.cc): float64 tensor -> int64 bit patterns, one rounding to nearest even,
    subnormals kept, overflow to inf or (saturating formats) to the largest finite value."""
    x = x.to(torch.float64)
    sign = torch.signbit(x).to(torch.int64) << (f.ebits + f.mbits)
    a = x.abs()
    normal_path = torch.isfinite(a) & (a != 0)
    mant, k = torch.frexp(torch.where(normal_path, a, torch.ones_like(a)))  # a = mant * 2^k, mant in [0.5, 1)
    k = k.to(torch.int64)
    e = k - 1  # a in [2^e, 2^(e+1))
    emin = 1 - f.bias
    sub = e < emin
    # Subnormal: quantum 2^(emin - mbits); a result of 2^mbits is the smallest normal (its bits are m).
    shift = torch.clamp(k + f.mbits - emin, min=-100, max=1000)
    m_sub = torch.round(mant * pow2(shift))
    # Normal: m in [2^mbits, 2^(mbits+1)]; a carry into the next binade bumps the exponent.
    m = torch.round(mant * float(2 ** (f.mbits + 1)))
    carry = m >= float(2 ** (f.mbits + 1))
    m = torch.where(carry, torch.full_like(m, float(2 ** f.mbits)), m)
    e = e + carry.to(torch.int64)
    ef = e + f.bias
    mbits_val = m.to(torch.int64) - (1 << f.mbits)
    over = (ef > f.max_ef) | ((ef == f.max_ef) & (mbits_val > f.max_mant))
    normal_bits = torch.where(over, torch.full_like(ef, f.overflow), (ef << f.mbits) | mbits_val)
    bits = torch.where(sub, m_sub.to(torch.int64), normal_bits)
    bits = torch.where(a == 0, torch.zeros_like(bits), bits)
    bits = torch.where(torch.isinf(a), torch.full_like(bits, f.overflow), bits)
    bits = torch.where(torch.isnan(x), torch.full_like(bits, f.nan_bits), bits)
    return sign | bits


def decode_float(bits, f):
    """decode_float (host_tensor.cc): int64 bit patterns -> float64 values."""
    bits = bits.to(torch.int64)
    neg = ((bits >> (f.ebits + f.mbits)) & 1).bool()
    ef = (bits >> f.mbits) & ((1 << f.ebits) - 1)
    mant = bits & ((1 << f.mbits) - 1)
    all_ones = (1 << f.ebits) - 1
    sub_v = mant.to(torch.float64) * 2.0 ** (1 - f.bias - f.mbits)
    norm_v = (mant | (1 << f.mbits)).to(torch.float64) * pow2(torch.clamp(ef - f.bias - f.mbits, min=-1000))
    v = torch.where(ef == 0, sub_v, norm_v)
    if f.ieee:
        special = ef == all_ones
        v = torch.where(special & (mant == 0), torch.full_like(v, math.inf), v)
        v = torch.where(special & (mant != 0), torch.full_like(v, math.nan), v)
    else:
        v = torch.where((ef == all_ones) & (mant == (1 << f.mbits) - 1), torch.full_like(v, math.nan), v)
    return torch.where(neg, -v, v)


def round_int(x, lo, hi):
    """round_int (host_tensor.cc): NaN -> 0, saturate, round half to even."""
    x = torch.where(torch.isnan(x), torch.zeros_like(x), x)
    return torch.round(torch.clamp(x, lo, hi))


def round_to_dtype(x, dt):
    """kiln::round_to_dtype on a tensor (any float dtype): the nearest value of `dt`, returned in x's dtype."""
    if dt.name == "fp32":
        return x.to(torch.float32).to(x.dtype)  # static_cast<float>: nearest even, overflow to inf
    x64 = x.to(torch.float64)
    if dt.is_int:
        return round_int(x64, *dt.int_range).to(x.dtype)
    return decode_float(encode_float(x64, dt.fmt), dt.fmt).to(x.dtype)


def to_bits(values, dt):
    """Stored values (float64) -> int64 bit patterns of `dt` (HostTensor::encode per element)."""
    if dt.name == "fp32":
        return values.to(torch.float32).view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    if dt.is_int:
        return round_int(values, *dt.int_range).to(torch.int64)
    return encode_float(values, dt.fmt)


def from_bits(bits, dt):
    """int64 bit patterns (unsigned, as read) -> float64 values (HostTensor::decode per element)."""
    if dt.name == "fp32":
        signed = torch.where(bits >= 2 ** 31, bits - 2 ** 32, bits)
        return signed.to(torch.int32).view(torch.float32).to(torch.float64)
    if dt.is_int:
        if dt.size == 8:
            raise AssertionError("int64 is assembled in bytes_to_values")
        half = 2 ** (8 * dt.size - 1)
        return torch.where(bits >= half, bits - 2 * half, bits).to(torch.float64)
    return decode_float(bits, dt.fmt)


def storage_span(dims, strides):
    """HostTensor::storage_span: 1 + sum((dim - 1) * stride)."""
    return 1 + sum((d - 1) * s for d, s in zip(dims, strides))


def encode_tensor(values, dt, dims, strides, device="cpu"):
    """HostTensor::encode: logical values (row-major, float64) placed through `strides` into a storage span
    (gaps are zero), then little-endian bytes of every storage element. Returns bytes. The arithmetic runs
    on `device` (a GPU makes light work of the full-size examples)."""
    values = values.detach().to(device, torch.float64).reshape(dims)
    storage = torch.zeros(storage_span(dims, strides), dtype=torch.float64, device=device)
    storage.as_strided(dims, strides).copy_(values)
    bits = to_bits(storage, dt)
    cols = [((bits >> (8 * j)) & 0xFF) for j in range(dt.size)]  # little-endian byte order, explicitly
    raw = torch.stack(cols, dim=1).to(torch.uint8).reshape(-1).cpu()
    buf = bytearray(raw.numel())
    torch.frombuffer(buf, dtype=torch.uint8).copy_(raw)
    return bytes(buf)


def decode_tensor(data, dt, dims, strides, device="cpu"):
    """HostTensor::decode: bytes -> logical values (float64, dims, on `device`), read through `strides`."""
    span = storage_span(dims, strides)
    if len(data) != span * dt.size:
        raise ValueError(f"{dt.name}{list(dims)} strides {list(strides)} needs {span * dt.size} bytes, "
                         f"got {len(data)}")
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device).to(torch.int64).reshape(span, dt.size)
    if dt.size == 8:  # int64: low and high 32-bit halves, summed in double (one rounding, as static_cast)
        lo = sum(raw[:, j] << (8 * j) for j in range(4))
        hi = sum(raw[:, 4 + j] << (8 * j) for j in range(4))
        hi = torch.where(hi >= 2 ** 31, hi - 2 ** 32, hi)
        storage = hi.to(torch.float64) * 4294967296.0 + lo.to(torch.float64)
    else:
        storage = from_bits(sum(raw[:, j] << (8 * j) for j in range(dt.size)), dt)
    return storage.as_strided(dims, strides).contiguous()


def check_encoding():
    """Known values and round trips that src/validate/host_tensor_test.cc pins. Returns a list of failures."""
    fails = []
    d64 = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    known = [
        ("fp16", [1.0, -2.0, 0.0, -0.0, 65504.0, 1.0 / 3.0, math.inf, -math.inf, 65520.0, 65519.99, 2.0 ** -24,
                  2.0 ** -25, 3 * 2.0 ** -25, 1023 * 2.0 ** -24, 2.0 ** -14, 1023.5 * 2.0 ** -24, math.nan],
         [0x3C00, 0xC000, 0x0000, 0x8000, 0x7BFF, 0x3555, 0x7C00, 0xFC00, 0x7C00, 0x7BFF, 0x0001, 0x0000, 0x0002,
          0x03FF, 0x0400, 0x0400, 0x7E00]),
        ("bf16", [1.0, -1.0, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -20, 3.0e38, math.inf, math.nan],
         [0x3F80, 0xBF80, 0x3F80, 0x3F82, 0x3F81, 0x7F62, 0x7F80, 0x7FC0]),
        ("fp8_e4m3", [1.0, 448.0, 464.0, 1000.0, math.inf, -1000.0, 2.0 ** -9, math.nan],
         [0x38, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x01, 0x7F]),
        ("fp8_e5m2", [1.0, 57344.0, 1e6, 2.0 ** -16, math.nan], [0x3C, 0x7B, 0x7C, 0x01, 0x7E]),
    ]
    for name, vals, want in known:
        got = to_bits(d64(vals), DTYPES[name]).tolist()
        for v, g, w in zip(vals, got, want):
            if g != w:
                fails.append(f"{name}({v!r}) = 0x{g:X}, expected 0x{w:X}")
    for name, n in (("fp16", 1 << 16), ("bf16", 1 << 16), ("fp8_e4m3", 256), ("fp8_e5m2", 256)):
        dt = DTYPES[name]
        bits = torch.arange(n, dtype=torch.int64)
        v = from_bits(bits, dt)
        ok = torch.isnan(v) | (to_bits(v, dt) == bits)
        if not bool(ok.all()):
            fails.append(f"{name}: {int((~ok).sum())} bit patterns do not round-trip")
    ints = [(200.0, "int8", 127.0), (-200.0, "int8", -128.0), (2.5, "int8", 2.0), (3.5, "int32", 4.0),
            (math.nan, "int32", 0.0), (1.0 + 2.0 ** -30, "fp32", 1.0)]
    for v, name, want in ints:
        got = float(round_to_dtype(d64([v]), DTYPES[name])[0])
        if got != want:
            fails.append(f"round_to_dtype({v!r}, {name}) = {got}, expected {want}")
    # HostTensor.StridedValuesAndEncodeDecode: NCHW dims [1,2,2,3] stored NHWC; fp16 6.0 = 0x4600 at bytes 2..3.
    dims, nhwc = [1, 2, 2, 3], [12, 1, 6, 2]
    raw = encode_tensor(torch.arange(12, dtype=torch.float64), DTYPES["fp16"], dims, nhwc)
    if len(raw) != 24 or raw[2] != 0x00 or raw[3] != 0x46:
        fails.append("NHWC fp16 encoding: bytes 2..3 are not 00 46")
    back = decode_tensor(raw, DTYPES["fp16"], dims, nhwc).reshape(-1).tolist()
    if back != list(range(12)):
        fails.append("NHWC fp16 decode does not give back the values")
    for name in ("int8", "int32", "int64"):
        vals = d64([-128.0, -1.0, 0.0, 1.0, 127.0])
        back = decode_tensor(encode_tensor(vals, DTYPES[name], [5], [1]), DTYPES[name], [5], [1])
        if back.tolist() != vals.tolist():
            fails.append(f"{name}: values do not round-trip through bytes")
    return fails


# ---- The spec (docs/spec.md, src/spec/spec.cc) and inference (src/graph/validate.cc, infer.cc) --------

# spec op name -> (kind, mode); src/spec/op_table.cc.
OPS = {
    "conv_fprop": ("conv_fprop", None), "conv_dgrad": ("conv_dgrad", None), "conv_wgrad": ("conv_wgrad", None),
    "matmul": ("matmul", None),
    "add": ("pointwise", "add"), "sub": ("pointwise", "sub"), "mul": ("pointwise", "mul"),
    "div": ("pointwise", "div"), "min": ("pointwise", "min"), "max": ("pointwise", "max"),
    "scale": ("pointwise", "scale"), "bias_add": ("pointwise", "bias_add"), "relu": ("pointwise", "relu"),
    "gelu_erf": ("pointwise", "gelu_erf"), "gelu_tanh": ("pointwise", "gelu_tanh"), "silu": ("pointwise", "silu"),
    "sigmoid": ("pointwise", "sigmoid"), "tanh": ("pointwise", "tanh"), "exp": ("pointwise", "exp"),
    "identity": ("pointwise", "identity"),
    "reduce_sum": ("reduction", "sum"), "reduce_max": ("reduction", "max"), "reduce_min": ("reduction", "min"),
    "reduce_amax": ("reduction", "amax"),
    "layer_norm": ("layer_norm", None), "rms_norm": ("rms_norm", None), "sdpa": ("sdpa", None),
}
OP_ALIASES = {"gelu": "gelu_erf", "swish": "silu"}
BINARY_MODES = {"add", "sub", "mul", "div", "min", "max", "scale", "bias_add"}
CONV_ATTRS = {"padding", "pre_padding", "post_padding", "stride", "dilation", "groups"}
ALL_ATTRS = CONV_ATTRS | {"axes", "epsilon", "causal", "attn_scale"}


def json_type(v):
    """The JSON type named as spec.cc's messages name it."""
    for kind, name in ((type(None), "null"), (bool, "a boolean"), (str, "a string"), (list, "an array"),
                       (dict, "an object"), (float, "a number with a fraction")):
        if isinstance(v, kind):
            return name
    return "a number"


def get_int(v, where):
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(f"{where}: expected an integer, got {json_type(v)}")
    return v


def get_int_list(v, where):
    if isinstance(v, list):
        return [get_int(x, f"{where}[{i}]") for i, x in enumerate(v)]
    return [get_int(v, where)]


def get_number(v, where):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"{where}: expected a number, got {json_type(v)}")
    if not math.isfinite(v):
        raise SpecError(f"{where}: must be finite")
    return float(v)


def no_duplicate_keys(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise SpecError(f"duplicate key '{k}' (a JSON object must not repeat a key)")
        seen[k] = v
    return seen


class Tensor:
    def __init__(self, name, index):
        self.name, self.index = name, index
        self.dims = []           # values (dynamic dims resolved)
        self.layout = "row_major"
        self.strides = []        # explicit, or resolved from the layout
        self.dtype = None        # explicit DType or None
        self.by_value = False
        self.value = 0.0


class Node:
    def __init__(self, name):
        self.name = name
        self.kind = self.mode = None
        self.inputs, self.outputs = [], []
        self.compute_dtype = None
        self.pre, self.post, self.stride, self.dilation, self.groups = [], [], [], [], 1
        self.axes = []
        self.epsilon = 1e-5
        self.causal = False
        self.attn_scale = None

    def label(self):
        op = self.mode if self.kind == "pointwise" else ("reduce_" + self.mode if self.kind == "reduction"
                                                         else self.kind)
        return f"node '{self.name}' ({op})"


class Graph:
    """A parsed and inferred spec: the parts of kiln::Graph the cross-check needs."""

    def __init__(self):
        self.name = ""
        self.io_dtype, self.intermediate_dtype, self.compute_dtype = DTYPES["fp16"], DTYPES["fp32"], DTYPES["fp32"]
        self.dynamic = {}
        self.tensors, self.nodes, self.outputs = [], [], []
        self.order = []  # topological node order

    def producer(self, t):
        for i, n in enumerate(self.nodes):
            if t in n.outputs:
                return i
        return -1

    def is_input(self, t):
        return self.producer(t) < 0

    def dtype_of(self, t):
        """Graph::dtype_of (src/graph/types.cc): explicit; a by-value scalar the compute dtype; graph inputs
        and outputs the io dtype; anything else the intermediate dtype."""
        d = self.tensors[t]
        if d.dtype is not None:
            return d.dtype
        if d.by_value:
            return self.compute_dtype
        if self.is_input(t) or t in self.outputs:
            return self.io_dtype
        return self.intermediate_dtype


def parse_spec(text):
    """parse_spec_string (src/spec/spec.cc) then validate_graph's inference; raises SpecError."""
    try:
        doc = json.loads(text, object_pairs_hook=no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise SpecError(f"malformed JSON: {e}") from None
    if not isinstance(doc, dict):
        raise SpecError(f"spec: expected an object, got {json_type(doc)}")
    allowed = {"name", "description", "io_dtype", "intermediate_dtype", "compute_dtype", "dynamic", "tensors",
               "nodes", "outputs", "pin"}
    for k in doc:
        if k not in allowed:
            raise SpecError(f"spec: unknown key '{k}' (expected one of: {', '.join(sorted(allowed))})")
    for k in ("tensors", "nodes", "outputs"):
        if k not in doc:
            raise SpecError(f"spec: missing key '{k}'")
    g = Graph()
    g.name = doc.get("name", "")
    for k in ("io_dtype", "intermediate_dtype", "compute_dtype"):
        if k in doc:
            setattr(g, k, parse_dtype(doc[k], f"spec: key '{k}'"))
    for sym, v in (doc.get("dynamic") or {}).items():
        g.dynamic[sym] = get_int(v, f"dynamic dim '{sym}'")

    index = {}
    raw_dims = {}
    if not isinstance(doc["tensors"], dict):
        raise SpecError("spec: key 'tensors': expected an object of name: tensor")
    for name, j in doc["tensors"].items():
        where = f"tensor '{name}'"
        if not isinstance(j, dict):
            raise SpecError(f"{where}: expected an object, got {json_type(j)}")
        for k in j:
            if k not in ("dims", "layout", "strides", "dtype", "value"):
                raise SpecError(f"{where}: unknown key '{k}' (expected one of: dims, dtype, layout, strides, value)")
        t = Tensor(name, len(g.tensors))
        if "dims" in j:
            if not isinstance(j["dims"], list) or not j["dims"]:
                raise SpecError(f"{where}: attribute 'dims': expected a non-empty array")
            raw_dims[t.index] = j["dims"]
        if "layout" in j and "strides" in j:
            raise SpecError(f"{where}: give 'layout' or 'strides', not both")
        if "layout" in j:
            if j["layout"] not in ("row_major", "NCHW", "NHWC"):
                raise SpecError(f"{where}: attribute 'layout': unknown layout '{j['layout']}'")
            t.layout = j["layout"]
        if "strides" in j:
            t.strides = get_int_list(j["strides"], f"{where}: attribute 'strides'")
            t.layout = "explicit"
        if "dtype" in j:
            t.dtype = parse_dtype(j["dtype"], f"{where}: attribute 'dtype'")
        if "value" in j:
            t.value = get_number(j["value"], f"{where}: attribute 'value'")
            t.by_value = True
        g.tensors.append(t)
        index[name] = t.index

    if not isinstance(doc["nodes"], list):
        raise SpecError("spec: key 'nodes': expected an array of nodes")
    input_names = []
    for i, j in enumerate(doc["nodes"]):
        where = f"nodes[{i}]"
        if not isinstance(j, dict):
            raise SpecError(f"{where}: expected an object")
        n = Node(j.get("name", where))
        if "name" in j:
            where = f"node '{n.name}'"
        if "op" not in j:
            raise SpecError(f"{where}: missing key 'op'")
        op = OP_ALIASES.get(j["op"], j["op"])
        if op not in OPS:
            raise SpecError(f"{where}: unknown op '{j['op']}' (see docs/spec.md for the op table)")
        n.kind, n.mode = OPS[op]
        where += f" ({op})"
        own = {"conv_fprop": CONV_ATTRS, "conv_dgrad": CONV_ATTRS, "conv_wgrad": CONV_ATTRS, "reduction": {"axes"},
               "layer_norm": {"epsilon"}, "rms_norm": {"epsilon"}, "sdpa": {"causal", "attn_scale"}}.get(n.kind, set())
        for k in j:
            if k in ("name", "op", "inputs", "outputs", "compute_dtype") or k in own:
                continue
            raise SpecError(f"{where}: " + (f"attribute '{k}' does not apply to this op" if k in ALL_ATTRS
                                            else f"unknown key '{k}'"))
        attr = lambda k: f"{where}: attribute '{k}'"  # noqa: E731
        if "compute_dtype" in j:
            n.compute_dtype = parse_dtype(j["compute_dtype"], attr("compute_dtype"))
        if "padding" in j:
            if "pre_padding" in j or "post_padding" in j:
                raise SpecError(f"{attr('padding')}: give 'padding' or 'pre_padding'/'post_padding', not both")
            n.pre = get_int_list(j["padding"], attr("padding"))
            n.post = list(n.pre)
        if "pre_padding" in j:
            n.pre = get_int_list(j["pre_padding"], attr("pre_padding"))
        if "post_padding" in j:
            n.post = get_int_list(j["post_padding"], attr("post_padding"))
        if "stride" in j:
            n.stride = get_int_list(j["stride"], attr("stride"))
        if "dilation" in j:
            n.dilation = get_int_list(j["dilation"], attr("dilation"))
        if "groups" in j:
            n.groups = get_int(j["groups"], attr("groups"))
        if "axes" in j:
            n.axes = get_int_list(j["axes"], attr("axes"))
            if isinstance(j["axes"], list) and not n.axes:
                raise SpecError(f"{attr('axes')}: must not be empty (omit it to reduce every axis)")
        if "epsilon" in j:
            n.epsilon = get_number(j["epsilon"], attr("epsilon"))
        if "causal" in j:
            if not isinstance(j["causal"], bool):
                raise SpecError(f"{attr('causal')}: expected true or false")
            n.causal = j["causal"]
        if "attn_scale" in j:
            n.attn_scale = get_number(j["attn_scale"], attr("attn_scale"))
        for k in ("inputs", "outputs"):
            if k not in j:
                raise SpecError(f"{where}: missing key '{k}'")
            if not isinstance(j[k], list) or not all(isinstance(s, str) for s in j[k]):
                raise SpecError(f"{where}: key '{k}': expected an array of tensor names")
        for o in j["outputs"]:
            if o not in index:
                index[o] = len(g.tensors)
                g.tensors.append(Tensor(o, len(g.tensors)))
            n.outputs.append(index[o])
        input_names.append(j["inputs"])
        g.nodes.append(n)
    for n, names in zip(g.nodes, input_names):
        for s in names:
            if s not in index:
                raise SpecError(f"{n.label()}: input '{s}' is not a declared tensor or a node output")
            n.inputs.append(index[s])
    if not isinstance(doc["outputs"], list):
        raise SpecError("spec: key 'outputs': expected an array of tensor names")
    for o in doc["outputs"]:
        if o not in index:
            raise SpecError(f"output '{o}' is not a declared tensor or a node output")
        g.outputs.append(index[o])

    # Dynamic dims take their values (validate.cc check_dynamic_dims).
    for t_idx, dims in raw_dims.items():
        t = g.tensors[t_idx]
        for i, d in enumerate(dims):
            if isinstance(d, str):
                if d not in g.dynamic:
                    raise SpecError(f"tensor '{t.name}': dim {i} uses dynamic dim '{d}', which is not declared")
                t.dims.append(g.dynamic[d])
            else:
                v = get_int(d, f"tensor '{t.name}': attribute 'dims'[{i}]")
                if v <= 0:
                    raise SpecError(f"tensor '{t.name}': dim {i} is {v}; dims must be positive")
                t.dims.append(v)
    validate(g)
    return g


def topological_order(g):
    """graph_internal::topological_order: Kahn's algorithm, lowest node index first."""
    writer = {}
    for i, n in enumerate(g.nodes):
        if len(n.outputs) != 1:
            raise SpecError(f"{n.label()}: {len(n.outputs)} outputs, expected 1")
        if n.outputs[0] in writer:
            raise SpecError(f"tensor '{g.tensors[n.outputs[0]].name}': written by two nodes")
        writer[n.outputs[0]] = i
    pending = [0] * len(g.nodes)
    users = [[] for _ in g.nodes]
    for i, n in enumerate(g.nodes):
        for t in n.inputs:
            if t in writer:
                pending[i] += 1
                users[writer[t]].append(i)
    ready = [i for i in range(len(g.nodes)) if pending[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(g.nodes):
        raise SpecError("graph has a cycle")
    return order


def conv_out_extent(inp, f, pre, post, stride, dil):
    span = dil * (f - 1) + 1
    padded = inp + pre + post
    return 0 if padded < span else (padded - span) // stride + 1


def broadcast_dims(a, b, where):
    r = max(len(a), len(b))
    a1 = [1] * (r - len(a)) + list(a)
    b1 = [1] * (r - len(b)) + list(b)
    out = []
    for i, (x, y) in enumerate(zip(a1, b1)):
        if x != y and x != 1 and y != 1:
            raise SpecError(f"{where}: {list(a)} and {list(b)} do not broadcast (axis {i}: {x} vs {y})")
        out.append(y if x == 1 else x)
    return out


def infer_node(g, n):
    """Output dims of one node (src/graph/infer.cc), normalising conv attributes and reduction axes."""
    where = n.label()
    ins = [g.tensors[t].dims for t in n.inputs]
    want = {"conv_fprop": 2, "conv_dgrad": 2, "conv_wgrad": 2, "matmul": 2, "reduction": 1, "layer_norm": 3,
            "sdpa": 3}.get(n.kind)
    if n.kind == "pointwise":
        want = 2 if n.mode in BINARY_MODES else 1
    if n.kind == "rms_norm":
        if len(ins) not in (2, 3):
            raise SpecError(f"{where}: {len(ins)} inputs, expected 2 or 3")
    elif len(ins) != want:
        raise SpecError(f"{where}: {len(ins)} inputs, expected {want}")
    for t, d in zip(n.inputs, ins):
        if not d:
            raise SpecError(f"{where}: input '{g.tensors[t].name}' has no dims")
    declared = g.tensors[n.outputs[0]].dims
    if n.kind.startswith("conv_"):
        rank = len(ins[0])
        if rank < 3 or rank > 5 or len(ins[1]) != rank:
            raise SpecError(f"{where}: convolution inputs need equal ranks 3 to 5")
        sp = rank - 2
        for name, default in (("pre", 0), ("post", 0), ("stride", 1), ("dilation", 1)):
            v = getattr(n, name)
            if not v:
                v = [default] * sp
            if len(v) == 1 and sp > 1:
                v = v * sp
            if len(v) != sp:
                raise SpecError(f"{where}: attribute '{name}': {len(v)} entries, expected {sp} (one per spatial dim)")
            setattr(n, name, v)
        if declared and len(declared) != rank:
            raise SpecError(f"{where}: output declared with rank {len(declared)}, expected {rank}")
        G = n.groups
        if n.kind == "conv_fprop":
            x, w = ins
            if x[1] % G or w[0] % G or w[1] * G != x[1]:
                raise SpecError(f"{where}: channels do not fit groups={G}")
            y = [x[0], w[0]]
            for i in range(sp):
                o = conv_out_extent(x[2 + i], w[2 + i], n.pre[i], n.post[i], n.stride[i], n.dilation[i])
                if o <= 0:
                    raise SpecError(f"{where}: filter does not fit spatial dim {2 + i}")
                y.append(o)
            return y
        if n.kind == "conv_dgrad":
            dy, w = ins
            dx = [dy[0], w[1] * G]
            for i in range(sp):
                e = declared[2 + i] if declared else ((dy[2 + i] - 1) * n.stride[i] - n.pre[i] - n.post[i] +
                                                      n.dilation[i] * (w[2 + i] - 1) + 1)
                if e <= 0 or conv_out_extent(e, w[2 + i], n.pre[i], n.post[i], n.stride[i], n.dilation[i]) != dy[2 + i]:
                    raise SpecError(f"{where}: no input extent for spatial dim {2 + i}")
                dx.append(e)
            if w[0] % G or dy[1] != w[0]:
                raise SpecError(f"{where}: channels do not fit groups={G}")
            return dx
        x, dy = ins
        if x[0] != dy[0] or x[1] % G or dy[1] % G:
            raise SpecError(f"{where}: batch or channels do not fit")
        dw = [dy[1], x[1] // G]
        for i in range(sp):
            f = declared[2 + i] if declared else ((x[2 + i] + n.pre[i] + n.post[i] - (dy[2 + i] - 1) * n.stride[i] - 1)
                                                  // n.dilation[i] + 1)
            if f <= 0 or conv_out_extent(x[2 + i], f, n.pre[i], n.post[i], n.stride[i], n.dilation[i]) != dy[2 + i]:
                raise SpecError(f"{where}: no filter extent for spatial dim {2 + i}")
            dw.append(f)
        return dw
    if n.kind == "matmul":
        a, b = ins
        if len(a) < 2 or len(b) < 2:
            raise SpecError(f"{where}: matmul operands need rank >= 2")
        if a[-1] != b[-2]:
            raise SpecError(f"{where}: inner dims differ: K={a[-1]} vs K={b[-2]}")
        return broadcast_dims(a[:-2], b[:-2], f"{where}: batch dims") + [a[-2], b[-1]]
    if n.kind == "pointwise":
        a = ins[0]
        if n.mode not in BINARY_MODES:
            return list(a)
        b = ins[1]
        if n.mode == "scale":
            if math.prod(b) != 1:
                raise SpecError(f"{where}: a scale must be a scalar (one element), got {b}")
            return list(a)
        if n.mode == "bias_add":
            if len(b) != len(a) or any(y not in (1, x) for x, y in zip(a, b)):
                raise SpecError(f"{where}: bias {b} does not broadcast into {a} (same rank, each extent 1 or x's)")
            return list(a)
        return broadcast_dims(a, b, where)
    if n.kind == "reduction":
        x = ins[0]
        r = len(x)
        axes = n.axes or list(range(r))
        norm = []
        for ax in axes:
            if ax < -r or ax >= r:
                raise SpecError(f"{where}: attribute 'axes': axis {ax} is out of range for rank {r}")
            norm.append(ax + r if ax < 0 else ax)
        if len(set(norm)) != len(norm):
            raise SpecError(f"{where}: attribute 'axes': an axis is listed twice")
        n.axes = sorted(norm)
        return [1 if i in n.axes else d for i, d in enumerate(x)]
    if n.kind in ("layer_norm", "rms_norm"):
        x = ins[0]
        if len(x) < 2:
            raise SpecError(f"{where}: x needs rank >= 2")
        expect = [1] + list(x[1:])
        for t, p in zip(n.inputs[1:], ins[1:]):
            if list(p) != expect:
                raise SpecError(f"{where}: input '{g.tensors[t].name}': dims {p}, expected {expect}")
        if not (n.epsilon > 0):
            raise SpecError(f"{where}: attribute 'epsilon' must be positive")
        return list(x)
    q, k, v = ins  # sdpa
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise SpecError(f"{where}: q, k and v must be [B, H, S, D]")
    if k[0] != q[0] or v[0] != q[0] or v[1] != k[1] or q[1] % k[1] or v[2] != k[2] or k[3] != q[3]:
        raise SpecError(f"{where}: q {q}, k {k}, v {v} do not fit")
    return [q[0], q[1], q[2], v[3]]


def validate(g):
    """validate_graph's inference in topological order, layout inheritance and layout -> strides."""
    g.order = topological_order(g)
    for t in g.tensors:
        if t.by_value and not t.dims:
            t.dims = [1]
        if g.is_input(t.index) and not t.dims:
            raise SpecError(f"tensor '{t.name}': graph input has no dims")
    for ni in g.order:
        n = g.nodes[ni]
        t = g.tensors[n.outputs[0]]
        if t.by_value:
            raise SpecError(f"{n.label()}: output '{t.name}' is a by-value scalar")
        inferred = infer_node(g, n)
        if t.dims:
            if list(t.dims) != list(inferred):
                raise SpecError(f"{n.label()}: output '{t.name}': declared dims {t.dims} but the node produces "
                                f"{inferred}")
        elif t.layout == "row_major" and not t.strides:
            first = g.tensors[n.inputs[0]]  # an undeclared output takes its first input's image layout
            if first.layout in ("NCHW", "NHWC") and len(inferred) >= 3:
                t.layout = first.layout
        t.dims = list(inferred)
    for t in g.tensors:
        r = len(t.dims)
        if t.layout == "explicit":
            if len(t.strides) != r or any(s <= 0 for s in t.strides):
                raise SpecError(f"tensor '{t.name}': {len(t.strides)} strides for rank {r} (all positive)")
            continue
        if t.layout in ("NCHW", "NHWC") and r < 3:
            raise SpecError(f"tensor '{t.name}': layout {t.layout} needs rank 3 or more, got {r}")
        st = [1] * r
        if t.layout == "NHWC":  # dims stay N, C, spatial...; channels innermost in memory
            s = t.dims[1]
            for i in range(r - 1, 1, -1):
                st[i] = s
                s *= t.dims[i]
            st[0] = s
        else:
            s = 1
            for i in range(r - 1, -1, -1):
                st[i] = s
                s *= t.dims[i]
        t.strides = st


# ---- Tolerances (src/validate/numerics.cc) ----------------------------------------------------------

COARSENESS = {"fp32": 0, "fp16": 1, "bf16": 2, "fp8_e4m3": 3, "fp8_e5m2": 4}


def node_reduction_length(g, n):
    """NodePlan::reduction_length (src/validate/node_plan.cc)."""
    dims = lambda t: g.tensors[t].dims  # noqa: E731
    if n.kind.startswith("conv_"):
        x = dims(n.outputs[0] if n.kind == "conv_dgrad" else n.inputs[0])
        w = dims(n.outputs[0] if n.kind == "conv_wgrad" else n.inputs[1])
        y = dims(n.outputs[0] if n.kind == "conv_fprop" else n.inputs[0 if n.kind == "conv_dgrad" else 1])
        filt, out = math.prod(w[2:]), math.prod(y[2:])
        if n.kind == "conv_fprop":
            return (x[1] // n.groups) * filt
        if n.kind == "conv_dgrad":
            return (w[0] // n.groups) * filt
        return x[0] * out
    if n.kind == "matmul":
        return dims(n.inputs[0])[-1]
    if n.kind == "reduction":
        x = dims(n.inputs[0])
        return math.prod(x[a] for a in n.axes)
    if n.kind in ("layer_norm", "rms_norm"):
        x = dims(n.inputs[0])
        return math.prod(x) // max(x[0], 1)
    if n.kind == "sdpa":
        k = dims(n.inputs[1])
        return max(k[2], k[3])
    return 1


def default_tolerance(dt, reduction_length, allow_tf32, intermediate, accumulation_bound):
    """kiln::default_tolerance. Returns dict(atol, rtol, nmse_max, rel_floor, acc_coeff, acc_nmse_coeff)."""
    if dt.is_int:
        i8 = dt.name == "int8"
        return {"atol": 1.0 if i8 else 0.0, "rtol": 0.0, "nmse_max": 1e-2 if i8 else 0.0, "rel_floor": 1.0,
                "acc_coeff": 0.0, "acc_nmse_coeff": 0.0}
    base = dt.name
    if COARSENESS.get(intermediate.name, -1) > COARSENESS[base]:
        base = intermediate.name
    table = {"fp16": (1e-2, 1e-2, 1e-5, 1e-3), "bf16": (2e-2, 2e-2, 1e-4, 1e-2),
             "fp8_e4m3": (1.25e-1, 1.25e-1, 2e-2, 1e-1), "fp8_e5m2": (2.5e-1, 2.5e-1, 6e-2, 1e-1),
             "fp32": (1e-2, 5e-3, 2e-6, 1e-3) if allow_tf32 else (1e-5, 1e-5, 1e-10, 1e-6)}
    atol, rtol, nmse_max, floor = table[base]
    k = max(1.0, reduction_length / 64.0)
    if base == "fp32" and not allow_tf32:
        if not accumulation_bound:  # legacy: fp32 accumulation error grows like K near a cancelling sum
            atol *= k
            nmse_max *= k
    else:
        atol *= math.sqrt(k)  # rounding errors of inputs/outputs add like a random walk
    return {"atol": atol, "rtol": rtol, "nmse_max": nmse_max, "rel_floor": floor, "acc_coeff": 0.0,
            "acc_nmse_coeff": 0.0}


ACCUMULATION_FAILURE_PROBABILITY = 1e-12  # kAccumulationFailureProbability (include/kiln/validate/numerics.h)


def accumulation_lambda(K):
    """kiln::accumulation_lambda: Higham & Mary's lambda for a per-element failure probability 1e-12."""
    return math.sqrt(2.0 * math.log(2.0 * max(1, K) / ACCUMULATION_FAILURE_PROBABILITY)) / (1.0 - 2.0 ** -24)


def accumulation_into(g, t):
    """kiln::accumulation_into: the longest reduction on the paths into t, the coarsest accumulation unit
    roundoff (2^-11 for a conv/matmul computing in fp16, else 2^-24) and the number of nodes."""
    K, u, nodes, seen, stack = 1, 2.0 ** -24, 0, set(), [t]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        p = g.producer(v)
        if p < 0:
            continue
        n = g.nodes[p]
        nodes += 1
        K = max(K, node_reduction_length(g, n))
        compute = n.compute_dtype or g.compute_dtype
        if (n.kind.startswith("conv_") or n.kind == "matmul") and compute.name == "fp16":
            u = max(u, 2.0 ** -11)
        stack.extend(n.inputs)
    return K, u, nodes


UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8, "fp8_e4m3": 2.0 ** -4, "fp8_e5m2": 2.0 ** -3}


def output_tolerance(g, t, allow_tf32, tolerance_scale, bound):
    """The tolerance kiln::check_outputs gives output t, with the reduction length it used: with `bound`
    (a reference with magnitudes) the accumulation bound, else the legacy rule (fp32 atol and nmse x K/64)."""
    K, u_acc, nodes = accumulation_into(g, t)
    inter = g.intermediate_dtype if len(g.nodes) > 1 else DTYPES["fp32"]
    dt = g.dtype_of(t)
    tol = default_tolerance(dt, K, allow_tf32, inter, bound)
    if bound and not dt.is_int:
        # acc_coeff = lambda(K) sqrt(K) u_acc + n 2^-24 per element (times M_i); nmse may grow by
        # 4 (sqrt(K) u_acc + n 2^-24)^2 sum M^2 / sum ref^2.
        rms = math.sqrt(K) * u_acc + nodes * 2.0 ** -24
        tol["acc_coeff"] = accumulation_lambda(K) * math.sqrt(K) * u_acc + nodes * 2.0 ** -24
        tol["acc_nmse_coeff"] = 4.0 * rms * rms
    p = g.producer(t)
    if p >= 0 and g.nodes[p].kind == "reduction":
        # A fused reduction may read the unrounded accumulator: rtol at least 2u of its input's dtype.
        u = UNIT_ROUNDOFF.get(g.dtype_of(g.nodes[p].inputs[0]).name, 0.0)
        tol["rtol"] = max(tol["rtol"], 2 * u)
        tol["nmse_max"] = max(tol["nmse_max"], 4 * u * u)
    tol["atol"] *= tolerance_scale
    tol["rtol"] *= tolerance_scale
    tol["acc_coeff"] *= tolerance_scale
    return tol, K


def measure_error(out, ref, tol, magnitude=None):
    """kiln::measure_error over logical elements (float64 tensors of one shape) and kiln::judge; with a
    magnitude tensor M each element's band widens by acc_coeff * M_i and nmse's limit by the allowance."""
    a, r = out.reshape(-1).to(torch.float64), ref.reshape(-1).to(torch.float64)
    r_fin, a_fin = torch.isfinite(r), torch.isfinite(a)
    same = (torch.isnan(a) & torch.isnan(r)) | (a == r)
    ref_nf_mismatch = ~r_fin & ~same          # a non-finite reference matches only the same value
    out_nf = r_fin & ~a_fin                   # NaN/Inf where the reference is finite
    both = r_fin & a_fin
    zero = torch.zeros_like(r)
    diff = torch.where(both, (a - r).abs(), zero)
    rabs = torch.where(both, r.abs(), zero)
    allowed = tol["atol"] + tol["rtol"] * rabs
    sum_sq_mag = 0.0
    if magnitude is not None:
        m = torch.where(both, magnitude.reshape(-1).to(torch.float64), zero)
        allowed = allowed + tol["acc_coeff"] * m
        sum_sq_mag = float((m * m).sum())
    floor = tol["rel_floor"] if tol["rel_floor"] > 0 else 1e-30
    rel = diff / torch.clamp(rabs, min=floor)
    sum_sq_err = float((diff * diff).sum())
    sum_sq_ref = float((rabs * rabs).sum())
    e = {
        "count": a.numel(),
        "max_abs": float(diff.max()) if a.numel() else 0.0,
        "max_rel": float(rel.max()) if a.numel() else 0.0,
        "nmse": sum_sq_err / sum_sq_ref if sum_sq_ref > 0 else sum_sq_err,
        "nmse_allowance": (tol["acc_nmse_coeff"] * (sum_sq_mag / sum_sq_ref if sum_sq_ref > 0 else sum_sq_mag)
                           if magnitude is not None else 0.0),
        "nan_count": int(out_nf.sum()),
        "mismatch_count": int(ref_nf_mismatch.sum() + out_nf.sum() + (both & (diff > allowed)).sum()),
    }
    # worst_index as measure_error picks it: the last NaN/Inf output, else the first non-finite reference
    # not matched, else the first largest |out - ref| / (atol + rtol|ref|).
    if e["nan_count"]:
        e["worst_index"] = int(torch.nonzero(out_nf)[-1])
    elif bool(ref_nf_mismatch.any()):
        e["worst_index"] = int(torch.nonzero(ref_nf_mismatch)[0])
    elif bool(both.any()):
        big = torch.finfo(torch.float64).max
        ratio = torch.where(allowed > 0, diff / torch.where(allowed > 0, allowed, torch.ones_like(allowed)),
                            torch.where(diff > 0, torch.full_like(diff, big), zero))
        ratio = torch.where(both, ratio, torch.full_like(ratio, -math.inf))
        e["worst_index"] = int(torch.argmax(ratio))
    else:
        e["worst_index"] = -1
    e["nmse_limit"] = tol["nmse_max"] + e["nmse_allowance"]
    e["verdict"] = ("Incorrect" if e["nan_count"] or e["mismatch_count"] or not (e["nmse"] <= e["nmse_limit"])
                    else "Passed")
    return e


# ---- Inputs (src/validate/reference_common.cc make_random_inputs) ----------------------------------

def input_ranges(g):
    """The value range each graph input needs, from its consumers (as make_random_inputs sets them)."""
    rng = {t.index: (-1.0, 1.0) for t in g.tensors}
    for n in g.nodes:
        for i, t in enumerate(n.inputs):
            if n.kind in ("layer_norm", "rms_norm") and i == 1:
                rng[t] = (0.5, 1.5)
            if n.kind == "layer_norm" and i == 2:
                rng[t] = (-0.5, 0.5)
            if n.kind == "pointwise" and i == 1 and n.mode == "bias_add":
                rng[t] = (-0.5, 0.5)
            if n.kind == "pointwise" and i == 1 and n.mode == "div":
                rng[t] = (0.5, 1.5)
    return rng


def make_inputs(g, seed, device="cpu"):
    """Seeded uniform values for every graph input that is not by-value: float64 logical tensors on
    `device`, rounded to the tensor's dtype (as HostTensor::fill_uniform). Each tensor has its own CPU
    torch.Generator stream (the same values on every device), the seed mixed with the tensor index as
    make_random_inputs does."""
    out = {}
    ranges = input_ranges(g)
    for t in g.tensors:
        if not g.is_input(t.index) or t.by_value:
            continue
        dt = g.dtype_of(t.index)
        lo, hi = ranges[t.index]
        gen = torch.Generator(device="cpu")
        gen.manual_seed((seed ^ (0x9E3779B97F4A7C15 * (t.index + 1))) & 0xFFFFFFFFFFFFFFFF)
        u = torch.rand(math.prod(t.dims), generator=gen, dtype=torch.float64).to(device)
        if dt.is_int:
            ilo, ihi = math.ceil(lo), math.floor(hi)
            x = ilo + torch.floor(u * max(ihi - ilo + 1.0, 1.0))
        else:
            x = lo + (hi - lo) * u
        x = round_to_dtype(x, dt)
        if not bool((x != 0).any()):
            x[0] = float(round_to_dtype(torch.ones(1, dtype=torch.float64), dt)[0])
        out[t.index] = x.reshape(t.dims)
    return out


# ---- The graph in PyTorch -------------------------------------------------------------------------

CONV = {1: (F.conv1d, torch.nn.grad.conv1d_input, torch.nn.grad.conv1d_weight),
        2: (F.conv2d, torch.nn.grad.conv2d_input, torch.nn.grad.conv2d_weight),
        3: (F.conv3d, torch.nn.grad.conv3d_input, torch.nn.grad.conv3d_weight)}


def pad_spatial(x, pre, post):
    """Zero padding of the spatial dims, pre/post per dim (F.pad lists the last dim first)."""
    pads = []
    for p0, p1 in reversed(list(zip(pre, post))):
        pads += [p0, p1]
    return F.pad(x, pads)


def run_conv(n, a, b, out_dims):
    sp = len(out_dims) - 2
    fprop, data_grad, weight_grad = CONV[sp]
    sym = n.pre == n.post
    pad = n.pre if sym else [0] * sp
    if n.kind == "conv_fprop":
        x = a if sym else pad_spatial(a, n.pre, n.post)
        return fprop(x, b, None, n.stride, pad, n.dilation, n.groups)
    if n.kind == "conv_dgrad":  # dy, w -> dx: the gradient of conv_fprop with respect to its input
        size = list(out_dims) if sym else out_dims[:2] + [d + p0 + p1 for d, p0, p1 in zip(out_dims[2:], n.pre, n.post)]
        dx = data_grad(size, b, a, n.stride, pad, n.dilation, n.groups)
        if not sym:
            dx = dx[(slice(None), slice(None)) + tuple(slice(p, p + d) for p, d in zip(n.pre, out_dims[2:]))]
        return dx
    x = a if sym else pad_spatial(a, n.pre, n.post)  # x, dy -> dw
    return weight_grad(x, list(out_dims), b, n.stride, pad, n.dilation, n.groups)


def run_sdpa(n, q, k, v):
    scale = n.attn_scale if n.attn_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if k.shape[1] != q.shape[1]:
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=n.causal, scale=scale, enable_gqa=True)
        except TypeError:  # torch < 2.5: query head h reads key head h // (H / Hk)
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=n.causal, scale=scale)


def run_node(g, n, ins, out_dims):
    """One node with PyTorch, in the dtype of its (float) inputs."""
    if n.kind.startswith("conv_"):
        return run_conv(n, ins[0], ins[1], out_dims)
    if n.kind == "matmul":
        return torch.matmul(ins[0], ins[1])
    if n.kind == "pointwise":
        a = ins[0]
        b = ins[1] if len(ins) > 1 else None
        ops = {"add": torch.add, "bias_add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
               "scale": lambda x, s: x * s.reshape(()),
               "min": torch.fmin, "max": torch.fmax,  # as pointwise_value's fmin/fmax: a NaN loses to a number
               "relu": F.relu, "gelu_erf": lambda x: F.gelu(x, approximate="none"),
               "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "sigmoid": torch.sigmoid,
               "tanh": torch.tanh, "exp": torch.exp, "identity": lambda x: x}
        return ops[n.mode](a, b) if n.mode in BINARY_MODES else ops[n.mode](a)
    if n.kind == "reduction":
        x, axes = ins[0], n.axes
        if n.mode == "sum":
            return x.sum(dim=axes, keepdim=True)
        if n.mode == "max":
            return x.amax(dim=axes, keepdim=True)
        if n.mode == "min":
            return x.amin(dim=axes, keepdim=True)
        return x.abs().amax(dim=axes, keepdim=True)
    if n.kind in ("layer_norm", "rms_norm"):
        x = ins[0]
        shape = list(x.shape[1:])  # normalized over every axis but the first
        w = ins[1].reshape(shape)
        if n.kind == "layer_norm":
            return F.layer_norm(x, shape, w, ins[2].reshape(shape), n.epsilon)
        if hasattr(F, "rms_norm"):
            y = F.rms_norm(x, shape, w, n.epsilon)
        else:
            dims = list(range(1, x.dim()))
            y = x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + n.epsilon) * w
        return y + ins[2].reshape(shape) if len(ins) > 2 else y
    return run_sdpa(n, ins[0], ins[1], ins[2])


def pointwise_magnitude(mode, va, vb, vy, ba, bb, ea, eb):
    """pointwise_magnitude (src/validate/reference_math.h), elementwise over broadcast tensors."""
    if mode in ("add", "sub", "bias_add"):
        return ba + bb
    if mode in ("min", "max"):
        return torch.fmax(ba, bb)
    if mode in ("mul", "scale"):
        return (2.0 if ea and eb else 1.0) * ba * bb
    if mode == "div":
        inv = 1.0 / vb.abs()
        return ba * inv * (1.0 + (bb * inv if eb else 0.0))
    if mode in ("relu", "tanh", "identity"):
        return ba
    if mode in ("gelu_erf", "gelu_tanh"):
        return 1.13 * ba
    if mode == "silu":
        return 1.1 * ba
    if mode == "sigmoid":
        return torch.fmax(vy.abs(), 0.25 * ba)
    return vy.abs() * torch.clamp(ba, min=1.0)  # exp


def norm_magnitude(n, x, s, bx, bs, bb, ex, es, eb, vy):
    """norm_magnitude / norm_dterm_part (reference_math.h) with the row statistics of host_reference.cc."""
    layer = n.kind == "layer_norm"
    dims = list(range(1, x.dim()))
    shape = list(x.shape[1:])
    mean = x.mean(dim=dims, keepdim=True) if layer else torch.zeros_like(x[:1])
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)  # mean(x^2) for RMS norm
    inv = 1.0 / torch.sqrt(var + n.epsilon)
    bm = bx.mean(dim=dims, keepdim=True)
    mean_err = (1.0 + (1.0 if ex else 0.0)) * bm if layer else torch.zeros_like(bm)
    dterm = ((x - mean).abs() * ((bx if ex else 0.0) + mean_err)).mean(dim=dims, keepdim=True)
    xhat = (x - mean) * inv
    vs = s.reshape(shape)
    e = vs.abs() * inv * ((bx if ex else 0.0) + mean_err) + 0.5 * (vs * xhat).abs() * (var + 2.0 * dterm) / (
        var + n.epsilon)
    if es:
        e = e + bs.reshape(shape) * xhat.abs()
    if eb:
        e = e + bb.reshape(shape)
    return torch.fmax(vy.abs(), e)


def sdpa_magnitude(n, q, k, v, bq, bk, bv, eq, ek, ev, o):
    """sdpa_magnitude_term summed over keys (host_reference.cc sdpa_magnitude_of), batched:
    B_o = max(|o|, sum_j p_j ((Bv_j + |o|) S_j + (2 + Ev) Bv_j)), S_j = (1 + Eq + Ek) scale sum_d Bq_d Bk_jd."""
    scale = n.attn_scale if n.attn_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    rep = q.shape[1] // k.shape[1]
    if rep > 1:  # query head h reads key head h // (H / Hk)
        k, v, bk, bv = (t.repeat_interleave(rep, dim=1) for t in (k, v, bk, bv))
    scores = scale * torch.matmul(q, k.transpose(-1, -2))
    if n.causal:  # key j > query i is masked (top-left)
        keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, -math.inf)
    p = torch.softmax(scores, dim=-1)
    ps = p * ((1.0 + eq + ek) * abs(scale) * torch.matmul(bq, bk.transpose(-1, -2)))
    acc = torch.matmul(ps, bv) + o.abs() * ps.sum(dim=-1, keepdim=True) + (2.0 + ev) * torch.matmul(p, bv)
    return torch.fmax(o.abs(), acc)


def node_magnitude(g, n, vals, mags, carries, y, out_dims):
    """The magnitude of node n's output (host_reference.cc evaluate, magnitude pass): B >= |y| and the
    accumulation error of y <= c * B, from the operands' magnitudes and whether they carry error."""
    ins = [vals[t] for t in n.inputs]
    bs = [mags[t] for t in n.inputs]
    es = [carries[t] for t in n.inputs]
    if n.kind.startswith("conv_") or n.kind == "matmul":
        factor = 1.0 + es[0] + es[1]  # contraction_factor
        m = run_conv(n, bs[0], bs[1], out_dims) if n.kind != "matmul" else torch.matmul(bs[0], bs[1])
        return factor * m
    if n.kind == "pointwise":
        va, ba = ins[0], bs[0]
        vb = ins[1] if len(ins) > 1 else torch.zeros((), dtype=va.dtype, device=va.device)
        bb = bs[1] if len(bs) > 1 else torch.zeros((), dtype=va.dtype, device=va.device)
        if n.mode == "scale":
            vb, bb = vb.reshape(()), bb.reshape(())
        m = pointwise_magnitude(n.mode, va, vb, y, ba, bb, es[0], len(es) > 1 and es[1])
        return m.expand(out_dims)
    if n.kind == "reduction":  # a sum accumulates; max, min and amax pick one element
        if n.mode == "sum":
            return (1.0 + es[0]) * bs[0].sum(dim=n.axes, keepdim=True)
        return bs[0].amax(dim=n.axes, keepdim=True)
    if n.kind in ("layer_norm", "rms_norm"):
        has_bias = len(ins) > 2
        return norm_magnitude(n, ins[0], ins[1], bs[0], bs[1], bs[2] if has_bias else None, es[0], es[1],
                              has_bias and es[2], y)
    return sdpa_magnitude(n, ins[0], ins[1], ins[2], bs[0], bs[1], bs[2], es[0], es[1], es[2], y)


def run_graph_torch(g, inputs, device, compute, magnitudes=False):
    """Every node in topological order on `device` in `compute` (torch.float32 or float64); every tensor a
    node writes is rounded to its dtype, as the GPU stores it. Returns ({output index: float64 values},
    {output index: float64 magnitudes rounded to fp32, as ReferenceOutputs::magnitudes} or None)."""
    vals, mags, carries = {}, {}, {}

    def holder(t):  # integers are kept in float64 (identity may cast them); floats in the compute dtype
        return torch.float64 if g.dtype_of(t).is_int else compute

    for t in g.tensors:
        if not g.is_input(t.index):
            continue
        if t.by_value:
            v = torch.full(t.dims, t.value, dtype=torch.float64)
            v = round_to_dtype(v, g.dtype_of(t.index))
        else:
            v = inputs[t.index]
        vals[t.index] = v.to(device=device, dtype=holder(t.index))
        if magnitudes:  # a graph input: B = |x|, no accumulation error
            mags[t.index] = vals[t.index].abs().to(compute)
            carries[t.index] = False
    for ni in g.order:
        n = g.nodes[ni]
        o = n.outputs[0]
        ins = [vals[t] if n.mode == "identity" else vals[t].to(compute) for t in n.inputs]
        y = run_node(g, n, ins, g.tensors[o].dims)
        if list(y.shape) != list(g.tensors[o].dims):
            raise RuntimeError(f"{n.label()}: PyTorch gave shape {list(y.shape)}, the spec infers "
                               f"{g.tensors[o].dims}")
        if magnitudes:  # from the unrounded result, as the host reference does
            fvals = {t: vals[t].to(compute) for t in n.inputs}
            mags[o] = node_magnitude(g, n, fvals, mags, carries, y.to(compute), g.tensors[o].dims).contiguous()
            carries[o] = True
        vals[o] = round_to_dtype(y, g.dtype_of(o)).to(holder(o)).contiguous()
    out_vals = {t: vals[t].to(torch.float64) for t in g.outputs}
    if not magnitudes:
        return out_vals, None
    return out_vals, {t: mags[t].to(torch.float32).to(torch.float64) for t in g.outputs}


# ---- Running kiln ---------------------------------------------------------------------------------

KILN_EXIT = {1: "a check failed", 2: "bad input or usage", 3: "environment", 4: "corruption", 5: "not supported",
             6: "stale plan refused", 7: "made by a newer Kiln", 10: "internal error", 130: "interrupted"}


def last_line(text):
    lines = [s for s in text.strip().splitlines() if s.strip()]
    return lines[-1].strip() if lines else ""


def run_kiln(args, spec, in_dir, out_dir):
    cmd = [args.kiln, "run", spec, "--inputs", in_dir, "--save-outputs", out_dir]
    if args.allow_tf32:
        cmd.append("--allow-tf32")
    cmd += args.kiln_arg
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"cmd": cmd, "exit_code": None, "seconds": time.time() - t0,
                "error": f"kiln run timed out after {args.timeout} s"}
    rec = {"cmd": cmd, "exit_code": p.returncode, "seconds": round(time.time() - t0, 3),
           "stdout": p.stdout[-4000:], "stderr": p.stderr[-4000:]}
    if p.returncode != 0:
        why = last_line(p.stderr) or last_line(p.stdout)
        rec["error"] = f"kiln run exited {p.returncode} ({KILN_EXIT.get(p.returncode, '?')}): {why}"
    return rec


def read_kiln_outputs(g, out_dir, device):
    res = {}
    for t in g.outputs:
        d = g.tensors[t]
        path = os.path.join(out_dir, d.name + ".bin")
        with open(path, "rb") as f:
            data = f.read()
        res[t] = decode_tensor(data, g.dtype_of(t), d.dims, d.strides, device)
    return res


# ---- Driver ---------------------------------------------------------------------------------------

def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def fail_rows(spec, g, reason):
    if g is None:
        return [{"spec": spec, "output": "-", "dtype": "-", "elements": 0, "verdict": "Failed", "reason": reason}]
    return [{"spec": spec, "output": g.tensors[t].name, "dtype": g.dtype_of(t).name,
             "elements": math.prod(g.tensors[t].dims), "verdict": "Failed", "reason": reason} for t in g.outputs]


def check_spec(args, spec, files_dir):
    """One spec: returns (rows, record)."""
    rec = {"spec": spec}
    try:
        with open(spec, "r", encoding="utf-8") as f:
            g = parse_spec(f.read())
    except (OSError, SpecError, UnicodeDecodeError) as e:
        return fail_rows(spec, None, f"spec: {e}"), rec
    rec["graph"] = g.name
    rec["outputs"] = {g.tensors[t].name: {"dims": g.tensors[t].dims, "strides": g.tensors[t].strides,
                                          "dtype": g.dtype_of(t).name} for t in g.outputs}
    inputs = make_inputs(g, args.seed, args.device)
    candidate, cand_what = None, None
    with tempfile.TemporaryDirectory(prefix="torch_check_") as tmp:
        base = files_dir if files_dir else tmp
        in_dir, out_dir = os.path.join(base, "inputs"), os.path.join(base, "kiln_outputs")
        os.makedirs(in_dir, exist_ok=True)
        os.makedirs(out_dir, exist_ok=True)
        for t, v in inputs.items():
            d = g.tensors[t]
            with open(os.path.join(in_dir, d.name + ".bin"), "wb") as f:
                f.write(encode_tensor(v, g.dtype_of(t), d.dims, d.strides, args.device))
        rec["inputs"] = {g.tensors[t].name: {"dims": g.tensors[t].dims, "strides": g.tensors[t].strides,
                                             "dtype": g.dtype_of(t).name} for t in inputs}
        if not args.skip_kiln:
            k = run_kiln(args, spec, in_dir, out_dir)
            rec["kiln"] = k
            if "error" in k:
                return fail_rows(spec, g, k["error"]), rec
            print(f"    kiln: {last_line(k['stdout'])}", flush=True)
            try:
                candidate = read_kiln_outputs(g, out_dir, args.device)
            except (OSError, ValueError) as e:
                return fail_rows(spec, g, f"kiln output: {e}"), rec
            cand_what = "kiln"
    ref_dtype = torch.float64 if args.compute == "fp64" else torch.float32
    bound = args.tolerance == "bound"
    try:
        if candidate is None:  # --skip-kiln: the interpreter in fp32 is the candidate, fp64 the reference
            t0 = time.time()
            candidate, _ = run_graph_torch(g, inputs, args.device, torch.float32)
            sync(args.device)
            rec["torch_fp32_seconds"] = round(time.time() - t0, 3)
            cand_what, ref_dtype = "torch-fp32", torch.float64
        t0 = time.time()
        ref, mags = run_graph_torch(g, inputs, args.device, ref_dtype, magnitudes=bound)
        sync(args.device)
        rec["torch_seconds"] = round(time.time() - t0, 3)
    except Exception as e:  # noqa: BLE001 - any PyTorch failure is this spec's Failed row
        return fail_rows(spec, g, f"torch: {type(e).__name__}: {e}"), rec
    if files_dir:  # the PyTorch results in Kiln's encoding, beside the inputs and kiln's outputs
        ref_dir = os.path.join(files_dir, "torch_outputs")
        os.makedirs(ref_dir, exist_ok=True)
        for t in g.outputs:
            d = g.tensors[t]
            with open(os.path.join(ref_dir, d.name + ".bin"), "wb") as f:
                f.write(encode_tensor(ref[t], g.dtype_of(t), d.dims, d.strides, args.device))
            if mags is not None:
                os.makedirs(os.path.join(files_dir, "torch_magnitudes"), exist_ok=True)
                with open(os.path.join(files_dir, "torch_magnitudes", d.name + ".bin"), "wb") as f:
                    f.write(encode_tensor(mags[t], DTYPES["fp32"], d.dims, d.strides, args.device))
    rec["candidate"] = cand_what
    rec["reference"] = "torch-" + ("fp64" if ref_dtype == torch.float64 else "fp32")
    rows = []
    for t in g.outputs:
        d = g.tensors[t]
        tol, K = output_tolerance(g, t, args.allow_tf32, args.tolerance_scale, bound)
        e = measure_error(candidate[t], ref[t], tol, mags[t] if bound and not g.dtype_of(t).is_int else None)
        row = {"spec": spec, "output": d.name, "dtype": g.dtype_of(t).name, "elements": e["count"],
               "max_abs": e["max_abs"], "max_rel": e["max_rel"], "nmse": e["nmse"], "verdict": e["verdict"],
               "nan_count": e["nan_count"], "mismatch_count": e["mismatch_count"], "worst_index": e["worst_index"],
               "nmse_limit": e["nmse_limit"], "nmse_allowance": e["nmse_allowance"], "tolerance": tol,
               "reduction_length": K}
        if e["verdict"] != "Passed":
            why = []
            if e["nan_count"]:
                why.append(f"{e['nan_count']} NaN/Inf where the reference is finite")
            if e["mismatch_count"]:
                band = f"atol={tol['atol']:.2e} rtol={tol['rtol']:.2e}" + (
                    f" acc={tol['acc_coeff']:.2e}*M" if tol["acc_coeff"] else "")
                why.append(f"{e['mismatch_count']}/{e['count']} outside {band} (worst at index {e['worst_index']})")
            if not (e["nmse"] <= e["nmse_limit"]):
                why.append(f"nmse {e['nmse']:.2e} > {e['nmse_limit']:.2e}")
            row["reason"] = "; ".join(why)
        rows.append(row)
    del candidate, ref, mags
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows, rec


def fmt(v):
    return f"{v:.2e}" if isinstance(v, float) else "-"


def print_table(rows):
    head = ["spec", "output", "dtype", "elements", "max_abs", "max_rel", "nmse", "verdict"]
    table = [[r["spec"], r["output"], r["dtype"], str(r["elements"]), fmt(r.get("max_abs")), fmt(r.get("max_rel")),
              fmt(r.get("nmse")), r["verdict"] + (f": {r['reason']}" if r.get("reason") else "")] for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h) for i, h in enumerate(head)]
    widths[-1] = len(head[-1])
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    print(line(head))
    print(line(["-" * w for w in widths]))
    for row in table:
        print(line(row))


def git_revision():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        p = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return p.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def kiln_doctor(kiln):
    try:
        p = subprocess.run([kiln, "doctor", "--json"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": str(e)}
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"exit_code": p.returncode, "stdout": p.stdout[-2000:], "stderr": p.stderr[-2000:]}


def disable_tf32():
    """The reference must be more accurate than what it judges: no TF32 in PyTorch's fp32 conv/matmul.
    PyTorch >= 2.9 has per-backend fp32_precision, and refuses a mix of it with the legacy flags."""
    b = torch.backends
    if hasattr(b.cuda.matmul, "fp32_precision") and hasattr(getattr(b, "cudnn", None), "conv"):
        b.cuda.matmul.fp32_precision = "ieee"
        b.cudnn.conv.fp32_precision = "ieee"
        return "cuda.matmul and cudnn.conv fp32_precision=ieee"
    b.cuda.matmul.allow_tf32 = False
    b.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return "allow_tf32=False (matmul, cudnn)"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("specs", nargs="+", help="spec JSON files (docs/spec.md)")
    ap.add_argument("--kiln", default=os.environ.get("KILN", "build-gpu/kiln"), help="kiln binary (default: "
                    "$KILN or build-gpu/kiln)")
    ap.add_argument("--out", default="out/torch_check", help="folder for torch_check.json (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the random inputs (default: %(default)s)")
    ap.add_argument("--device", default="cuda", help="where PyTorch computes: cuda (default), cuda:N or cpu")
    ap.add_argument("--compute", choices=["fp32", "fp64"], default="fp32",
                    help="PyTorch reference precision (default fp32, TF32 off)")
    ap.add_argument("--skip-kiln", action="store_true",
                    help="no kiln: compare the PyTorch interpreter in fp32 against itself in fp64 (self-test)")
    ap.add_argument("--allow-tf32", action="store_true",
                    help="pass --allow-tf32 to kiln run and judge fp32 outputs with the TF32 tolerance")
    ap.add_argument("--tolerance-scale", type=float, default=1.0,
                    help="multiply atol, rtol and the accumulation coefficient (CheckOptions::tolerance_scale)")
    ap.add_argument("--tolerance", choices=["bound", "legacy"], default="bound",
                    help="bound (default): Kiln's check with magnitudes, the accumulation bound; legacy: "
                    "check_outputs from values alone (plain fp32 atol and nmse x K/64)")
    ap.add_argument("--kiln-arg", action="append", default=[],
                    help="extra argument for kiln run, repeatable (e.g. --kiln-arg=--use-store)")
    ap.add_argument("--keep-files", action="store_true",
                    help="keep inputs, kiln's and PyTorch's outputs (Kiln's encoding) under "
                    "OUT/files/<n>_<spec>/{inputs,kiln_outputs,torch_outputs}/")
    ap.add_argument("--timeout", type=float, default=900, help="seconds allowed per kiln run (default 900)")
    return ap.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("torch_check: CUDA is not available to this PyTorch; use --device cpu", file=sys.stderr)
        return 2
    if not args.skip_kiln:
        path = shutil.which(args.kiln) if os.sep not in args.kiln else args.kiln
        if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
            print(f"torch_check: kiln binary '{args.kiln}' not found or not executable (--kiln PATH, or "
                  "--skip-kiln)", file=sys.stderr)
            return 2
        args.kiln = os.path.abspath(path)
    for s in args.specs:
        if not os.path.isfile(s):
            print(f"torch_check: spec '{s}' not found", file=sys.stderr)
            return 2
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        print(f"torch_check: cannot create --out '{args.out}': {e}", file=sys.stderr)
        return 2
    if sys.byteorder != "little":
        print("torch_check: Kiln's raw files are little-endian; byte views here assume a little-endian host",
              file=sys.stderr)
    tf32_setting = disable_tf32()

    gpu = torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") else None
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}), "
          f"device {args.device}" + (f": {gpu}" if gpu else ""))
    print(f"kiln: {'(skipped: PyTorch fp32 vs fp64 self-test)' if args.skip_kiln else args.kiln}")
    enc_fail = check_encoding()
    print("encoding self-check (host_tensor_test.cc values, every fp16/bf16/fp8 bit pattern): " +
          ("ok" if not enc_fail else "FAILED: " + "; ".join(enc_fail[:5])))
    meta = {"argv": sys.argv, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "torch_cudnn": torch.backends.cudnn.version(), "device": args.device, "gpu": gpu,
            "python": platform.python_version(), "host": platform.node(), "git": git_revision(),
            "kiln": None if args.skip_kiln else args.kiln, "seed": args.seed, "compute": args.compute,
            "skip_kiln": args.skip_kiln, "allow_tf32": args.allow_tf32, "tolerance_scale": args.tolerance_scale,
            "tolerance": args.tolerance, "torch_tf32": tf32_setting,
            "encoding_self_check": enc_fail or "ok",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if not args.skip_kiln:
        meta["kiln_doctor"] = kiln_doctor(args.kiln)

    rows, specs = [], []
    for i, spec in enumerate(args.specs):
        print(f"[{i + 1}/{len(args.specs)}] {spec}", flush=True)
        files_dir = None
        if args.keep_files:
            stem = os.path.splitext(os.path.basename(spec))[0]
            files_dir = os.path.join(args.out, "files", f"{i:02d}_{stem}")
        r, rec = check_spec(args, spec, files_dir)
        rows += r
        specs.append(rec)
    print()
    print_table(rows)
    bad = [r for r in rows if r["verdict"] != "Passed"]
    ok = not bad and not enc_fail
    result = {"meta": meta, "rows": rows, "specs": specs,
              "summary": {"rows": len(rows), "passed": len(rows) - len(bad), "not_passed": len(bad), "ok": ok}}
    path = os.path.join(args.out, "torch_check.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2, allow_nan=True)
        f.write("\n")
    print(f"\n{len(rows) - len(bad)}/{len(rows)} outputs agree; results in {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
