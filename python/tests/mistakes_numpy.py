"""A NumPy RMSNorm worker that makes one of the common mistakes test_e2e expects driftcheck to name:

    --mistake returns     computes y and returns it, never writing case.y (the output keeps its poison)
    --mistake raw_floats  assigns float32 values to case.y, a bf16 output NumPy holds as raw uint16 codes (the
                          values are cast to integers)
"""

import argparse

import numpy as np

import driftcheck as dc

parser = argparse.ArgumentParser()
parser.add_argument("--mistake", choices=["returns", "raw_floats"], required=True)
args = parser.parse_args()


@dc.rmsnorm(tensors="numpy")
def rmsnorm(case):
    x = case.load("x", np.float32)
    w = case.load("w", np.float32)
    s = np.float32(1) / np.sqrt(np.mean(x * x, axis=1, dtype=np.float32, keepdims=True) + np.float32(case.params.eps))
    y = x * s * w
    if args.mistake == "returns":
        return y
    case.y[...] = y  # the mistake: float32 into uint16 bit patterns


@rmsnorm.supports
def _(case):
    if case.params.residual or case.params.weight_mode != "plain" or case.dtype("x") != "bf16":
        return "this test kernel: bf16, plain weight, no residual"


if __name__ == "__main__":
    dc.serve()
