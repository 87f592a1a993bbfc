"""Kiln's dtypes and raw tensor files (HostTensor::encode / decode, src/validate/host_tensor.cc).

A file holds every storage element (logical values placed through the strides, gaps zero) as
little-endian bits: fp16, bf16, fp8 e4m3 (e4m3fn) and e5m2 are PyTorch's float16, bfloat16,
float8_e4m3fn and float8_e5m2, so decoding is a view. Encoding keeps Kiln's rules: one round to nearest
even from double (through fp32 rounded to odd, which makes the second rounding exact), e4m3 saturating at
+-448 (infinities too), e5m2/fp16/bf16 overflowing to inf, NaN as the format's canonical NaN with its sign;
integers saturate, NaN -> 0, half to even.
"""

import math

import torch


class DType:
    def __init__(self, name, storage, nan_bits=None, saturate=None, int_range=None):
        self.name, self.storage, self.nan_bits, self.saturate, self.int_range = (name, storage, nan_bits, saturate,
                                                                                 int_range)
        self.size = torch.empty((), dtype=storage).element_size()

    @property
    def is_int(self):
        return self.int_range is not None

    def __repr__(self):
        return self.name


DTYPES = {d.name: d for d in (
    DType("fp32", torch.float32),
    DType("fp16", torch.float16, nan_bits=0x7E00),
    DType("bf16", torch.bfloat16, nan_bits=0x7FC0),
    DType("fp8_e4m3", torch.float8_e4m3fn, nan_bits=0x7F, saturate=448.0),
    DType("fp8_e5m2", torch.float8_e5m2, nan_bits=0x7E),
    DType("int8", torch.int8, int_range=(-128.0, 127.0)),
    DType("int32", torch.int32, int_range=(-2147483648.0, 2147483647.0)),
    # Doubles above 2^63 - 1024 are not int64s: round_to_dtype clamps to the largest double below 2^63.
    DType("int64", torch.int64, int_range=(-9223372036854775808.0, 9223372036854774784.0)),
)}
BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}  # a signed view of each size


def fp32_round_to_odd(x):
    """float64 -> float32 truncated toward zero with the last bit set when inexact (round to odd): a
    following round to nearest even into a format of <= 22 significand bits is then the single rounding."""
    f = x.to(torch.float32)
    f = torch.where(f.to(torch.float64).abs() > x.abs(), torch.nextafter(f, torch.zeros_like(f)), f)
    inexact = (f.to(torch.float64) != x) & ~torch.isnan(x)
    bits = f.view(torch.int32)
    return torch.where(inexact, bits | 1, bits).view(torch.float32)


def round_int(x, lo, hi):
    """round_int (host_tensor.cc): NaN -> 0, saturate, round half to even."""
    x = torch.where(torch.isnan(x), torch.zeros_like(x), x)
    return torch.round(torch.clamp(x, lo, hi))


def to_storage(x, dt):
    """Values (any float tensor) -> a tensor of dt's storage dtype holding what HostTensor::encode stores."""
    x = x.to(torch.float64)
    if dt.is_int:
        return round_int(x, *dt.int_range).to(dt.storage)
    if dt.name == "fp32":
        return x.to(torch.float32)  # static_cast<float>: nearest even, overflow to inf
    f = fp32_round_to_odd(x)
    if dt.saturate:
        f = torch.clamp(f, -dt.saturate, dt.saturate)  # keeps NaN
    y = f.to(dt.storage)
    # The canonical NaN with the value's sign (PyTorch's own NaN bits differ for bf16 and e5m2).
    half = 1 << (8 * dt.size - 1)
    signed = lambda v: v - 2 * half if v >= half else v  # noqa: E731
    view = y.view(BITS[dt.size])
    nan = torch.where(torch.signbit(x), torch.full_like(view, signed(dt.nan_bits | half)),
                      torch.full_like(view, dt.nan_bits))
    return torch.where(torch.isnan(x), nan, view).view(dt.storage)


def round_to_dtype(x, dt):
    """kiln::round_to_dtype on a tensor: the nearest value of `dt`, returned in x's dtype."""
    return to_storage(x, dt).to(x.dtype)


def to_bits(values, dt):
    """Values -> unsigned int64 bit patterns of `dt` (HostTensor::encode per element)."""
    bits = to_storage(values, dt).view(BITS[dt.size]).to(torch.int64)
    return bits & ((1 << (8 * dt.size)) - 1) if dt.size < 8 else bits


def from_bits(bits, dt):
    """Unsigned int64 bit patterns -> float64 values (HostTensor::decode per element)."""
    half = 1 << (8 * dt.size - 1)
    signed = torch.where(bits >= half, bits - 2 * half, bits) if dt.size < 8 else bits
    return signed.to(BITS[dt.size]).view(dt.storage).to(torch.float64)


def storage_span(dims, strides):
    """HostTensor::storage_span: 1 + sum((dim - 1) * stride)."""
    return 1 + sum((d - 1) * s for d, s in zip(dims, strides))


def encode_tensor(values, dt, dims, strides, device="cpu"):
    """HostTensor::encode: logical values (row-major) placed through `strides` into a storage span (gaps
    zero), then the little-endian bytes of every storage element. Returns bytes."""
    values = values.detach().to(device, torch.float64).reshape(dims)
    storage = torch.zeros(storage_span(dims, strides), dtype=torch.float64, device=device)
    storage.as_strided(dims, strides).copy_(values)
    raw = to_storage(storage, dt).view(torch.uint8).reshape(-1).cpu()
    buf = bytearray(raw.numel())
    torch.frombuffer(buf, dtype=torch.uint8).copy_(raw)
    return bytes(buf)


def decode_tensor(data, dt, dims, strides, device="cpu"):
    """HostTensor::decode: bytes -> logical values (float64, dims, on `device`), read through `strides`."""
    span = storage_span(dims, strides)
    if len(data) != span * dt.size:
        raise ValueError(f"{dt.name}{list(dims)} strides {list(strides)} needs {span * dt.size} bytes, "
                         f"got {len(data)}")
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
    storage = raw.view(dt.storage).to(torch.float64)  # int64 -> double: one rounding, as static_cast
    return storage.as_strided(dims, strides).contiguous()


def check_encoding(device="cpu"):
    """Known values and round trips that src/validate/host_tensor_test.cc pins (and single roundings from
    double that a round through fp32 would get wrong). Returns a list of failures."""
    fails = []
    d64 = lambda v: torch.tensor(v, dtype=torch.float64, device=device)  # noqa: E731
    known = [
        ("fp16", [1.0, -2.0, 0.0, -0.0, 65504.0, 1.0 / 3.0, math.inf, -math.inf, 65520.0, 65519.99, 2.0 ** -24,
                  2.0 ** -25, 3 * 2.0 ** -25, 1023 * 2.0 ** -24, 2.0 ** -14, 1023.5 * 2.0 ** -24, math.nan,
                  -math.nan, 1 + 2.0 ** -11 + 2.0 ** -40, 1e300],
         [0x3C00, 0xC000, 0x0000, 0x8000, 0x7BFF, 0x3555, 0x7C00, 0xFC00, 0x7C00, 0x7BFF, 0x0001, 0x0000, 0x0002,
          0x03FF, 0x0400, 0x0400, 0x7E00, 0xFE00, 0x3C01, 0x7C00]),
        ("bf16", [1.0, -1.0, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -20, 3.0e38, math.inf, math.nan,
                  -math.nan, 1 + 2.0 ** -8 + 2.0 ** -30, 1e300, -1e-300],
         [0x3F80, 0xBF80, 0x3F80, 0x3F82, 0x3F81, 0x7F62, 0x7F80, 0x7FC0, 0xFFC0, 0x3F81, 0x7F80, 0x8000]),
        ("fp8_e4m3", [1.0, 448.0, 464.0, 1000.0, math.inf, -1000.0, 2.0 ** -9, math.nan, -math.inf, 1e300],
         [0x38, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x01, 0x7F, 0xFE, 0x7E]),
        ("fp8_e5m2", [1.0, 57344.0, 1e6, 2.0 ** -16, math.nan, 61439.0, 61440.0, math.inf],
         [0x3C, 0x7B, 0x7C, 0x01, 0x7E, 0x7B, 0x7C, 0x7C]),
    ]
    for name, vals, want in known:
        got = to_bits(d64(vals), DTYPES[name]).tolist()
        for v, g, w in zip(vals, got, want):
            if g != w:
                fails.append(f"{name}({v!r}) = 0x{g:X}, expected 0x{w:X}")
    for name, n in (("fp16", 1 << 16), ("bf16", 1 << 16), ("fp8_e4m3", 256), ("fp8_e5m2", 256)):
        dt = DTYPES[name]
        bits = torch.arange(n, dtype=torch.int64, device=device)
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
    raw = encode_tensor(torch.arange(12, dtype=torch.float64), DTYPES["fp16"], dims, nhwc, device)
    if len(raw) != 24 or raw[2] != 0x00 or raw[3] != 0x46:
        fails.append("NHWC fp16 encoding: bytes 2..3 are not 00 46")
    back = decode_tensor(raw, DTYPES["fp16"], dims, nhwc, device).reshape(-1).tolist()
    if back != list(range(12)):
        fails.append("NHWC fp16 decode does not give back the values")
    for name in ("int8", "int32", "int64"):
        vals = d64([-128.0, -1.0, 0.0, 1.0, 127.0])
        back = decode_tensor(encode_tensor(vals, DTYPES[name], [5], [1], device), DTYPES[name], [5], [1], device)
        if back.tolist() != vals.tolist():
            fails.append(f"{name}: values do not round-trip through bytes")
    return fails


def make_inputs(g, seed, device="cpu"):
    """Seeded uniform values for every graph input that is not by-value, in the range Kiln's
    make_random_inputs draws it from (the normalized graph's "draw"): float64 logical tensors on `device`,
    rounded to the tensor's dtype (as HostTensor::fill_uniform). Each tensor has its own CPU
    torch.Generator stream (the same values on every device), the seed mixed with the tensor index as
    make_random_inputs does. A tensor never comes out all zeros."""
    out = {}
    for t in g.drawn_inputs():
        dt = DTYPES[t.dtype]
        lo, hi = t.draw
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
