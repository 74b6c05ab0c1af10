#!/usr/bin/env python3
"""A kernel judged through exchange files (docs/EXCHANGE.md), with NumPy only: reads a `driftcheck export`
directory, runs an RMSNorm on every rmsnorm case with the case's exact layout (strided rows, offsets, y aliasing x,
the residual updated in place), and writes each case's storages back, whole, to OUTPUTS/<id>.safetensors for
`driftcheck check`:

    driftcheck export --out cases --op rmsnorm --cases 64
    python3 examples/exchange/numpy_consumer.py cases outputs
    driftcheck check --cases cases --outputs outputs --backend-config examples/exchange/numpy_rmsnorm.toml

--planted-bug eps_outside computes x / (sqrt(mean(x^2)) + eps) instead of x / sqrt(mean(x^2) + eps), a bug real
kernels have had; check finds it on rows whose mean square is small next to eps.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

# driftcheck dtype -> (safetensors dtype, NumPy type of the stored elements)
STORED = {"fp64": ("F64", np.float64), "fp32": ("F32", np.float32), "fp16": ("F16", np.float16),
          "bf16": ("BF16", np.uint16), "fp8_e4m3fn": ("F8_E4M3", np.uint8), "fp8_e4m3fnuz": ("U8", np.uint8),
          "fp8_e5m2": ("F8_E5M2", np.uint8), "i32": ("I32", np.int32)}
ACTIVATIONS = ("fp32", "fp16", "bf16")  # what this kernel computes in; others are declined


def read_safetensors(path):
    """name -> flat NumPy array of the stored elements (bf16 as uint16, fp8 as uint8)."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    by_st = {st: t for st, t in STORED.values()}
    return {name: np.frombuffer(blob[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]],
                                dtype=by_st[e["dtype"]]).copy()
            for name, e in header.items()}


def write_safetensors(path, tensors, dtypes, metadata=None):
    """tensors: name -> flat array; dtypes: name -> driftcheck dtype. Written to a temp file and renamed."""
    header, chunks, at = {}, [], 0
    meta = dict(metadata or {})
    for name, arr in tensors.items():
        raw = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": STORED[dtypes[name]][0], "shape": [arr.size], "data_offsets": [at, at + len(raw)]}
        if dtypes[name] == "fp8_e4m3fnuz":
            meta["driftcheck.dtype." + name] = "fp8_e4m3fnuz"
        chunks.append(raw)
        at += len(raw)
    if meta:
        header["__metadata__"] = meta
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    os.replace(path + ".tmp", path)


def view(storage, t):
    """The tensor as a strided view of its storage (writes go to the storage)."""
    size = storage.itemsize
    return np.lib.stride_tricks.as_strided(storage[t["offset"]:], shape=t["shape"],
                                           strides=[s * size for s in t["strides"]])


def to_f32(values, dtype):
    if dtype == "bf16":
        return (values.astype(np.uint32) << 16).view(np.float32)
    return values.astype(np.float32)


def from_f32(values, dtype):
    """Rounded to nearest even into dtype's stored form."""
    if dtype == "bf16":
        u = values.astype(np.float32).view(np.uint32).astype(np.uint64)
        rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)
    return values.astype(STORED[dtype][1])


def rmsnorm(case, storages, planted_bug):
    t = case["tensors"]
    st = case["storages"]
    p = case["params"]
    dt = st[t["x"]["storage"]]["dtype"]
    v = {name: view(storages[st[t[name]["storage"]]["name"]], t[name]) for name in t}
    # Everything is read before anything is written: y may alias x, the residual is updated in place.
    z = to_f32(v["x"], dt)
    if p["residual"]:
        z = to_f32(from_f32(z + to_f32(v["residual"], dt), dt), dt)  # kernels store z and normalise what they stored
    w = to_f32(v["w"], dt)
    if p["weight_mode"] == "one_plus":
        w = np.float32(1) + w
    eps = np.float32(p["eps"])
    ms = np.mean(z * z, axis=1, dtype=np.float32, keepdims=True)
    scale = np.float32(1) / (np.sqrt(ms) + eps) if planted_bug == "eps_outside" else np.float32(1) / np.sqrt(ms + eps)
    y = from_f32(z * scale * w, dt)
    if p["residual"]:
        v["residual"][...] = from_f32(z, dt)
    v["y"][...] = y


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases")
    ap.add_argument("outputs")
    ap.add_argument("--planted-bug", choices=["eps_outside"])
    a = ap.parse_args()
    manifest = json.load(open(os.path.join(a.cases, "manifest.json")))
    os.makedirs(a.outputs, exist_ok=True)
    done = 0
    for entry in manifest["cases"]:
        case = entry["case"]
        if case["op"] != "rmsnorm":
            continue
        out = os.path.join(a.outputs, entry["outputs_file"])
        dt = case["storages"][case["tensors"]["x"]["storage"]]["dtype"]
        if dt not in ACTIVATIONS:
            write_safetensors(out, {}, {}, {"driftcheck.unsupported": f"{dt}: this kernel computes in fp32/fp16/bf16"})
            continue
        storages = read_safetensors(os.path.join(a.cases, entry["file"]))
        storages = {s["name"]: storages[s["name"]] for s in case["storages"]}  # the references are not returned
        rmsnorm(case, storages, a.planted_bug)
        write_safetensors(out, storages, {s["name"]: s["dtype"] for s in case["storages"]})
        done += 1
    print(f"numpy_consumer: wrote outputs of {done} rmsnorm cases to {a.outputs}", file=sys.stderr)


if __name__ == "__main__":
    main()
