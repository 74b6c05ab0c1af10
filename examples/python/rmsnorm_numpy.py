"""A CPU RMSNorm in NumPy, judged by driftcheck (runs anywhere, CI included).

Numerics (declared in rmsnorm_numpy.toml): x (and the residual) read exactly into fp32; with a residual,
z = x + residual in fp32 and residual <- act(z); the sum of squares in fp32 (NumPy's pairwise sum, per row, on a
contiguous copy, so a row's bits do not depend on the batch); s = 1 / sqrt(mean + eps) in fp32; y = act(z * s * w')
with w' = w or 1 + w in fp32: one rounding to the activation dtype.

--planted-bug stride_ignored: rows are read at r * H from the first element instead of r * row_stride, the bug of
vllm#24247 (fixed by #28103). It reads the row padding (poison) and the wrong rows whenever the row stride is
wider than the row and there are two rows or more.

    driftcheck fuzz --backends examples/python/rmsnorm_numpy.toml --backend 'ext.numpy.rmsnorm*' --seconds 60
"""

import argparse

import numpy as np

import driftcheck as dc

parser = argparse.ArgumentParser()
parser.add_argument("--planted-bug", choices=["stride_ignored"])
args = parser.parse_args()


def rows_of(case, name):
    """The [N, H] rows as float32 (contiguous copy)."""
    if args.planted_bug == "stride_ignored":
        view = case[name]
        item = view.itemsize
        contiguous = np.lib.stride_tricks.as_strided(view, view.shape, (view.shape[1] * item, item))
        return dc.dtypes.decode(contiguous, case.dtype(name), np.float32)
    return np.ascontiguousarray(case.load(name, np.float32))


@dc.rmsnorm(tensors="numpy")
def rmsnorm(case):
    p = case.params
    z = rows_of(case, "x")
    if p.residual:
        z = z + rows_of(case, "residual")  # fp32 add
        case.store("residual", z)
    w = case.load("w", np.float32)
    if p.weight_mode == "one_plus":
        w = np.float32(1) + w
    h = z.shape[1]
    mean = np.sum(z * z, axis=1, dtype=np.float32, keepdims=True) / np.float32(h)
    s = np.float32(1) / np.sqrt(mean + np.float32(p.eps))
    case.store("y", (z * s) * w)  # fp32 products, one rounding in store()


if __name__ == "__main__":
    dc.serve()
