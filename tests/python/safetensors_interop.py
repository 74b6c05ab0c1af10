#!/usr/bin/env python3
"""An independent reading and writing of safetensors files, with NumPy only (the `safetensors` package is not
in Debian), so that a misreading of the format shared by driftcheck's reader and writer cannot hide behind a
round trip. tests/safetensors_test.cpp runs it:

  safetensors_interop.py check FILE   verify the interop file driftcheck wrote; exit 0, or 1 naming the mismatch
  safetensors_interop.py write FILE   write the interop file driftcheck's test reads back

Both sides build the same content from the same rules (expected_values / every_code below and
interop_content() in safetensors_test.cpp): for every driftcheck dtype, values exact in that dtype and every
encoding of the small float formats; this file decodes those encodings with its own formulas.
"""
import json
import struct
import sys

import numpy as np

DTYPES = ["fp64", "fp32", "fp16", "bf16", "fp8_e4m3fn", "fp8_e4m3fnuz", "fp8_e5m2", "i32"]
# driftcheck dtype -> (safetensors dtype, NumPy storage type, bytes per element)
STORED = {
    "fp64": ("F64", np.float64), "fp32": ("F32", np.float32), "fp16": ("F16", np.float16),
    "bf16": ("BF16", np.uint16), "fp8_e4m3fn": ("F8_E4M3", np.uint8), "fp8_e4m3fnuz": ("U8", np.uint8),
    "fp8_e5m2": ("F8_E5M2", np.uint8), "i32": ("I32", np.int32),
}
# Small float formats: exponent bits, mantissa bits, bias, how the top of the range is used.
MINIFLOAT = {
    "fp8_e4m3fn": (4, 3, 7, "nan_all_ones"), "fp8_e4m3fnuz": (4, 3, 8, "fnuz"),
    "fp8_e5m2": (5, 2, 15, "ieee"),
}
METADATA = {"driftcheck.test": "interop", "note": "unicode \u00fc and \"quotes\""}


def expected_values(dtype):
    """Shape [2, 17]: multiples of 1/4 in [-2, 2] (exact in every float dtype, e5m2 included); i32 large."""
    i = np.arange(34)
    if dtype == "i32":
        return ((i - 17) * 123456789).astype(np.int64)
    return (i % 17 - 8) * 0.25


def decode_minifloat(codes, dtype):
    exp_bits, man_bits, bias, kind = MINIFLOAT[dtype]
    c = codes.astype(np.int64)
    sign = np.where((c >> (exp_bits + man_bits)) & 1, -1.0, 1.0)
    e = (c >> man_bits) & ((1 << exp_bits) - 1)
    m = c & ((1 << man_bits) - 1)
    mag = np.where(e == 0, np.ldexp(m.astype(float), 1 - bias - man_bits),
                   np.ldexp((m + (1 << man_bits)).astype(float), e - bias - man_bits))
    v = sign * mag
    top = e == (1 << exp_bits) - 1
    if kind == "ieee":
        v = np.where(top & (m == 0), sign * np.inf, v)
        v = np.where(top & (m != 0), np.nan, v)
    elif kind == "nan_all_ones":
        v = np.where(top & (m == (1 << man_bits) - 1), np.nan, v)
    else:  # fnuz: the "-0" encoding is the only NaN
        v = np.where(c == 0x80, np.nan, v)
    return v


def decode(raw, dtype):
    """Values of the stored elements (NumPy array of the storage type) as float64."""
    if dtype == "bf16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype in MINIFLOAT:
        return decode_minifloat(raw, dtype)
    return raw.astype(np.float64)


def encode(values, dtype):
    """Storage elements of values that are exact in dtype."""
    if dtype in MINIFLOAT:
        table = decode_minifloat(np.arange(256), dtype)  # the first code of 0 is +0
        return np.array([np.flatnonzero(table == v)[0] for v in values], dtype=np.uint8)
    if dtype == "bf16":
        return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.asarray(values).astype(STORED[dtype][1])


def every_code(dtype):
    """Every encoding of an 8- or 16-bit float format, in order (raw bits survive the file unchanged)."""
    bits = 8 if dtype in MINIFLOAT else 16
    return np.arange(1 << bits, dtype=np.uint8 if bits == 8 else np.uint16)


def content():
    """name -> (driftcheck dtype, shape, storage array)"""
    out = {}
    for dt in DTYPES:
        out["values." + dt] = (dt, [2, 17], encode(expected_values(dt), dt))
        if dt in ("fp16", "bf16") or dt in MINIFLOAT:
            codes = every_code(dt)
            out["codes." + dt] = (dt, [len(codes)], codes.view(STORED[dt][1]))
    out["scalar"] = ("fp64", [], np.array([0.1], dtype=np.float64))
    out["empty"] = ("fp32", [0, 3], np.zeros(0, dtype=np.float32))
    out["specials.fp32"] = ("fp32", [5], np.array([np.inf, -np.inf, np.nan, -0.0, 1e-45], dtype=np.float32))
    return out


def parse(path):
    """name -> (safetensors dtype, shape, bytes), metadata; with the specification's checks."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", {})
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    at = 0
    for begin, end, name in spans:
        assert begin == at, f"{name}: starts at {begin}, expected {at}"
        at = end
    assert at == len(data), f"data buffer has {len(data)} bytes, tensors cover {at}"
    tensors = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
               for k, v in header.items()}
    return tensors, metadata, n


def check(path):
    check_decoders()
    tensors, metadata, header_len = parse(path)
    assert (8 + header_len) % 8 == 0, f"data buffer starts at byte {8 + header_len}, not 8-byte aligned"
    want = content()
    assert set(tensors) == set(want), f"tensors {sorted(tensors)} != {sorted(want)}"
    for name, (dt, shape, arr) in want.items():
        st, nptype = STORED[dt]
        got_st, got_shape, raw = tensors[name]
        assert got_st == st, f"{name}: dtype {got_st}, expected {st}"
        assert got_shape == shape, f"{name}: shape {got_shape}, expected {shape}"
        got = np.frombuffer(raw, dtype=np.dtype(nptype).newbyteorder("<"))
        assert got.tobytes() == arr.tobytes(), f"{name}: stored bits differ"
        if name.startswith("values."):
            vals = decode(got, dt)
            assert np.array_equal(vals, expected_values(dt)), f"{name}: values {vals} differ"
    for name, (dt, _, _) in want.items():
        marked = metadata.get("driftcheck.dtype." + name)
        assert (marked == "fp8_e4m3fnuz") == (dt == "fp8_e4m3fnuz"), f"{name}: dtype metadata {marked}"
    user = {k: v for k, v in metadata.items() if not k.startswith("driftcheck.dtype.")}
    assert user == METADATA, f"metadata {user}"

def check_decoders():
    """This file's own fp8 decoders against the formats' published anchors (max finite as torch.finfo gives
    it; 1.0 differs between e4m3fn and e4m3fnuz by the bias), so a wrong decoder cannot agree with a wrong
    writer."""
    anchors = {"fp8_e4m3fn": {0x7E: 448.0, 0x38: 1.0, 0x01: 2.0**-9},
               "fp8_e4m3fnuz": {0x7F: 240.0, 0x40: 1.0, 0x01: 2.0**-10},
               "fp8_e5m2": {0x7B: 57344.0, 0x3C: 1.0, 0x7C: np.inf}}
    for dt, table in anchors.items():
        for code, value in table.items():
            got = decode(np.array([code], np.uint8), dt)[0]
            assert got == value, f"decoder self-check: {dt} 0x{code:02x} is {got}, expected {value}"


def write(path):
    """A valid file laid out unlike driftcheck's writer: header with spaces after separators and metadata
    first, tensors in name order (so none is aligned for its element size), no padding."""
    header, chunks, at = {}, [], 0
    meta = dict(METADATA)
    for name, (dt, shape, arr) in sorted(content().items()):
        raw = arr.astype(np.dtype(arr.dtype).newbyteorder("<")).tobytes()
        header[name] = {"dtype": STORED[dt][0], "shape": shape, "data_offsets": [at, at + len(raw)]}
        if dt == "fp8_e4m3fnuz":
            meta["driftcheck.dtype." + name] = "fp8_e4m3fnuz"
        chunks.append(raw)
        at += len(raw)
    text = json.dumps({"__metadata__": meta, **header}).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    try:
        check(path) if mode == "check" else write(path)
    except AssertionError as e:
        print(f"safetensors_interop: {path}: {e}", file=sys.stderr)
        sys.exit(1)
