"""A NumPy RMSNorm worker for bench/worker_faults_bench.cpp: its start-up costs what importing torch does
(STARTUP seconds, default 3; `import torch` took about 2.9 s where issue 22 measured it), and it crashes
(SIGABRT) on the share CRASH of the cases, chosen by a hash of the case's seed and index, so the same cases
crash in every worker process and every run. The numerics are examples/python/rmsnorm_numpy.py's."""

import hashlib
import os
import time

time.sleep(float(os.environ.get("STARTUP", "3")))

import numpy as np  # noqa: E402

import driftcheck as dc  # noqa: E402

CRASH = float(os.environ.get("CRASH", "0"))


def crashes(case) -> bool:
    digest = hashlib.sha256(f"{case.seed}/{case.index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2.0**64 < CRASH


@dc.rmsnorm(tensors="numpy")
def rmsnorm(case):
    if CRASH > 0 and crashes(case):
        os.abort()
    p = case.params
    z = np.ascontiguousarray(case.load("x", np.float32))
    if p.residual:
        z = z + np.ascontiguousarray(case.load("residual", np.float32))
        case.store("residual", z)
    w = case.load("w", np.float32)
    if p.weight_mode == "one_plus":
        w = np.float32(1) + w
    mean = np.sum(z * z, axis=1, dtype=np.float32, keepdims=True) / np.float32(z.shape[1])
    s = np.float32(1) / np.sqrt(mean + np.float32(p.eps))
    case.store("y", (z * s) * w)


if __name__ == "__main__":
    dc.serve()
