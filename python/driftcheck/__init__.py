"""driftcheck's Python runner: judge a kernel written in Python (NumPy, PyTorch, Triton, vLLM ops) with driftcheck.

A worker script registers one kernel per op with a decorator and calls `serve()`; driftcheck starts it as an
external backend (a TOML entry, docs/EXTERNAL.md) and sends it cases. See examples/python/ for runnable examples.
"""

from . import dtypes, layout, paged
from .api import Kernel, Unsupported, attention, concat, dual_rmsnorm_cat, kernels, rmsnorm, unavailable
from .case import Case, Params
from .worker import serve

__all__ = [
    "Case",
    "Kernel",
    "Params",
    "Unsupported",
    "attention",
    "concat",
    "dtypes",
    "dual_rmsnorm_cat",
    "kernels",
    "layout",
    "paged",
    "rmsnorm",
    "serve",
    "unavailable",
]
__version__ = "0.1.0"
