"""driftcheck's dtypes in NumPy and PyTorch, with exact conversions.

The formats and their rules are those of reference/include/driftcheck/reference/format.hpp (docs/REFERENCE.md
section 1): one rounding to nearest, ties to even, from the float64 given; overflow decided as if the exponent
were unbounded; canonical NaNs. NumPy has no bf16 or fp8 types, so those live in NumPy as their raw encodings
(uint16 for bf16, uint8 for fp8) and `decode` / `encode` convert them. PyTorch has bf16 everywhere and fp8 from
2.1 (e4m3fnuz from 2.2); without a native fp8 type a tensor holds the raw bytes as uint8 (`is_raw`).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

DTYPE_NAMES = ("fp64", "fp32", "fp16", "bf16", "fp8_e4m3fn", "fp8_e4m3fnuz", "fp8_e5m2", "i32")


@dataclasses.dataclass(frozen=True)
class FloatFormat:
    """A binary float format of at most 16 bits (format.hpp's FloatFormat)."""

    bits: int
    exp_bits: int
    man_bits: int
    bias: int
    has_inf: bool  # top exponent: zero mantissa is +-inf, the rest NaN (IEEE style)
    nan_all_ones: bool  # e4m3fn: only S.1111.111 is NaN, no infinities
    fnuz: bool  # the negative-zero code 0x80 is the one NaN; no infinities, no -0

    @property
    def sign_mask(self) -> int:
        return 1 << (self.bits - 1)

    @property
    def exp_mask(self) -> int:
        return (1 << self.exp_bits) - 1

    @property
    def man_mask(self) -> int:
        return (1 << self.man_bits) - 1

    @property
    def max_exp_field(self) -> int:
        return self.exp_mask - 1 if self.has_inf else self.exp_mask

    @property
    def max_man_at_top(self) -> int:
        return self.man_mask - 1 if self.nan_all_ones else self.man_mask

    @property
    def canonical_nan(self) -> int:
        if self.fnuz:
            return self.sign_mask
        if self.nan_all_ones:
            return (self.exp_mask << self.man_bits) | self.man_mask
        return (self.exp_mask << self.man_bits) | (1 << (self.man_bits - 1))

    @property
    def max_finite_code(self) -> int:
        return (self.max_exp_field << self.man_bits) | self.max_man_at_top


FORMATS = {
    "fp16": FloatFormat(16, 5, 10, 15, True, False, False),
    "bf16": FloatFormat(16, 8, 7, 127, True, False, False),
    "fp8_e4m3fn": FloatFormat(8, 4, 3, 7, False, True, False),
    "fp8_e4m3fnuz": FloatFormat(8, 4, 3, 8, False, False, True),
    "fp8_e5m2": FloatFormat(8, 5, 2, 15, True, False, False),
}

# How each dtype's elements are held in NumPy: native where NumPy has the type, else the raw encoding.
_NUMPY = {
    "fp64": np.dtype(np.float64),
    "fp32": np.dtype(np.float32),
    "fp16": np.dtype(np.float16),
    "bf16": np.dtype(np.uint16),
    "fp8_e4m3fn": np.dtype(np.uint8),
    "fp8_e4m3fnuz": np.dtype(np.uint8),
    "fp8_e5m2": np.dtype(np.uint8),
    "i32": np.dtype(np.int32),
}


def check_name(name: str) -> str:
    if name not in _NUMPY:
        raise ValueError(f"unknown dtype '{name}' (known: {', '.join(DTYPE_NAMES)})")
    return name


def itemsize(name: str) -> int:
    return _NUMPY[check_name(name)].itemsize


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype a storage of this dtype is held in (raw uint16/uint8 for bf16 and fp8)."""
    return _NUMPY[check_name(name)]


def is_fp8(name: str) -> bool:
    return name.startswith("fp8_")


def is_raw_in_numpy(name: str) -> bool:
    return name == "bf16" or is_fp8(name)


@functools.lru_cache(maxsize=None)
def decode_table(name: str) -> np.ndarray:
    """float64 value of every code of a small format (format.hpp's decode, NaNs included)."""
    f = FORMATS[name]
    codes = np.arange(1 << f.bits, dtype=np.int64)
    neg = (codes & f.sign_mask) != 0
    e = (codes >> f.man_bits) & f.exp_mask
    m = codes & f.man_mask
    sub = np.ldexp(m.astype(np.float64), 1 - f.bias - f.man_bits)
    norm = np.ldexp((m | (1 << f.man_bits)).astype(np.float64), (e - f.bias - f.man_bits).astype(np.int32))
    v = np.where(e == 0, sub, norm)
    v = np.where(neg, -v, v)
    if f.has_inf:
        top = e == f.exp_mask
        v = np.where(top & (m == 0), np.where(neg, -np.inf, np.inf), v)
        v = np.where(top & (m != 0), np.nan, v)
    if f.nan_all_ones:
        v = np.where((e == f.exp_mask) & (m == f.man_mask), np.nan, v)
    if f.fnuz:
        v[f.sign_mask] = np.nan
    v.setflags(write=False)
    return v


def decode(raw: np.ndarray, name: str, out_dtype=np.float64) -> np.ndarray:
    """Exact values of an array held as `numpy_dtype(name)` (every non-fp64 dtype fits float64 exactly; fp8,
    fp16 and bf16 also fit float32 exactly)."""
    check_name(name)
    raw = np.asarray(raw)
    if name == "bf16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(out_dtype)
    if is_fp8(name):
        return decode_table(name)[raw].astype(out_dtype)
    return raw.astype(out_dtype)


def encode(values, name: str, saturate: bool = False) -> np.ndarray:
    """Round float64 values once (nearest, ties to even) to `name`, returned as `numpy_dtype(name)`.

    Overflow gives +-inf where the format has it, else NaN (e4m3fn keeps the sign, fnuz has only 0x80), or with
    `saturate` the max finite value: format.hpp's Overflow::kIeee and kSaturate."""
    check_name(name)
    x = np.asarray(values, dtype=np.float64)
    if name == "fp64":
        return x.copy()
    if name == "i32":
        if not np.all(np.isfinite(x) & (x == np.rint(x)) & (np.abs(x) <= 2**31 - 1)):
            raise ValueError("i32 values must be integers in range")
        return x.astype(np.int32)
    if name == "fp32":
        with np.errstate(over="ignore"):
            r = x.astype(np.float32)
        if saturate:
            big = np.float32(np.finfo(np.float32).max)
            r = np.where(np.isinf(r) & ~np.isinf(x), np.copysign(big, x).astype(np.float32), r)
            r = np.where(np.isinf(x), np.copysign(big, x).astype(np.float32), r)
        return r.astype(np.float32)
    codes = _encode_codes(FORMATS[name], x, saturate)
    out = codes.astype(_NUMPY[name] if is_raw_in_numpy(name) else np.uint16)
    return out if is_raw_in_numpy(name) else out.view(np.float16)


def _encode_codes(f: FloatFormat, x: np.ndarray, saturate: bool) -> np.ndarray:
    # format.hpp's encode, elementwise: scale |x| so that its quantum is 1, rint (ties to even), renormalise a
    # carry into the next binade, then map overflow, zeros, infinities and NaN.
    sign = np.where(np.signbit(x), f.sign_mask, 0).astype(np.int64)
    if saturate:
        overflow = sign | f.max_finite_code
    elif f.has_inf:
        overflow = sign | (f.exp_mask << f.man_bits)
    elif f.nan_all_ones:
        overflow = sign | f.canonical_nan
    else:
        overflow = np.full_like(sign, f.canonical_nan)
    zero = np.zeros_like(sign) if f.fnuz else sign
    a = np.abs(x)
    finite = np.isfinite(a) & (a != 0)
    safe = np.where(finite, a, 1.0)
    _, e = np.frexp(safe)
    e = np.maximum(e.astype(np.int64) - 1, 1 - f.bias)  # subnormal range: fixed quantum
    r = np.rint(np.ldexp(safe, (f.man_bits - e).astype(np.int32)))
    implicit = float(1 << f.man_bits)
    carry = r >= 2 * implicit
    r = np.where(carry, r * 0.5, r)
    e = np.where(carry, e + 1, e)
    normal = r >= implicit
    exp_field = np.where(normal, e + f.bias, 0)
    man = np.where(normal, r - implicit, r).astype(np.int64)
    over = (exp_field > f.max_exp_field) | ((exp_field == f.max_exp_field) & (man > f.max_man_at_top))
    code = sign | (exp_field << f.man_bits) | man
    code = np.where(over, overflow, code)
    code = np.where(r == 0, zero, code)
    code = np.where(a == 0, zero, code)
    code = np.where(np.isinf(a), overflow, code)
    return np.where(np.isnan(x), f.canonical_nan, code)


def round_to(values, name: str, saturate: bool = False) -> np.ndarray:
    """float64 values rounded once to `name` (the value, not the encoding)."""
    return decode(encode(values, name, saturate), name)


# ---- PyTorch -------------------------------------------------------------------------------------------------

_TORCH_ATTR = {
    "fp64": "float64",
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp8_e4m3fn": "float8_e4m3fn",
    "fp8_e4m3fnuz": "float8_e4m3fnuz",
    "fp8_e5m2": "float8_e5m2",
    "i32": "int32",
}


def torch_dtype(name: str):
    """The torch dtype of a storage: the native one, or torch.uint8 for an fp8 format this torch lacks."""
    import torch

    return getattr(torch, _TORCH_ATTR[check_name(name)], None) or torch.uint8


def is_raw_in_torch(name: str) -> bool:
    import torch

    return is_fp8(name) and getattr(torch, _TORCH_ATTR[name], None) is None


def to_float(t, name: str, scale: float = 1.0, dtype=None):
    """Values of a tensor or array of dtype `name` as float32 (or `dtype`), times `scale` (applied in that
    float type, one rounding per element when scale != 1). Works on native and raw (uint8/uint16) holdings."""
    if isinstance(t, np.ndarray):
        v = decode(t, name, dtype or np.float32)
        return v * v.dtype.type(scale) if scale != 1.0 else v
    import torch

    dtype = dtype or torch.float32
    if is_raw_in_torch(name):
        table = torch.as_tensor(decode_table(name), dtype=dtype, device=t.device)
        v = table[t.long()]
    else:
        v = t.to(dtype)
    return v * scale if scale != 1.0 else v
