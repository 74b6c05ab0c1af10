"""driftcheck's Python runner: judge a kernel written in Python (NumPy, PyTorch, Triton, vLLM ops) with driftcheck.

A worker script registers one kernel per op with a decorator and calls `serve()`; driftcheck starts it as an
external backend (a TOML entry, docs/PROTOCOL.md) and sends it cases. See examples/python/ for runnable examples.
From a test, `fuzz(kernel, numerics=...)` runs a campaign on a decorated kernel and `gate(config)` runs the CI
gate (docs/PYTHON.md; the pytest plugin is driftcheck.pytest_plugin, examples in examples/pytest/).
"""

from . import dtypes, layout, paged
from .api import Kernel, Unsupported, attention, concat, dual_rmsnorm_cat, kernels, rmsnorm, unavailable
from .case import Case, Params
from .testing import DriftcheckError, DriftFound, GateFailed, fuzz, gate
from .worker import serve

__all__ = [
    "Case",
    "DriftFound",
    "DriftcheckError",
    "GateFailed",
    "Kernel",
    "Params",
    "Unsupported",
    "attention",
    "concat",
    "dtypes",
    "dual_rmsnorm_cat",
    "fuzz",
    "gate",
    "kernels",
    "layout",
    "paged",
    "rmsnorm",
    "serve",
    "unavailable",
]
__version__ = "0.1.0"
