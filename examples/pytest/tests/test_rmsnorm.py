import driftcheck as dc

from mykernels.rmsnorm import rmsnorm

# What the kernel computes, the oracle's tolerance: fp32 math, act(x * s) and then times w, two roundings.
NUMERICS = {"output_roundings": 2}


def test_rmsnorm():
    dc.fuzz(rmsnorm, numerics=NUMERICS, seconds=30)
