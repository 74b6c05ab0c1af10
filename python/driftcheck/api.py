"""The decorator API: one decorator per op registers the kernel a worker runs.

    import driftcheck as dc

    @dc.rmsnorm(tensors="torch", device="cuda")
    def my_rmsnorm(case):
        ...  # read case.x, case.w (and case.residual), write case.y

    @my_rmsnorm.supports
    def _(case):               # metadata only: dtypes, shapes, params
        if case.dtype("x") == "fp32":
            return "my kernel is instantiated for bf16/fp16 only"

    if __name__ == "__main__":
        dc.serve()
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from .ops import OPS, op_spec

TENSOR_KINDS = ("torch", "numpy")


class Unsupported(Exception):
    """Raised by a kernel (or its supports function) for a case it cannot run; the message is the reason."""


@dataclasses.dataclass
class Kernel:
    op: str
    fn: Callable
    tensors: str  # "torch" or "numpy"
    device: str  # torch device for "torch"; "cpu" for "numpy"
    supports_fn: Optional[Callable] = None

    def __call__(self, case):
        return self.fn(case)

    def supports(self, fn: Callable) -> Callable:
        """Registers fn(case) -> None/True (supported) or a reason string / False (unsupported)."""
        self.supports_fn = fn
        return fn

    def check_supports(self, case) -> Optional[str]:
        """None when supported, else the reason."""
        if self.supports_fn is None:
            return None
        try:
            verdict = self.supports_fn(case)
        except Unsupported as e:
            return str(e) or "unsupported"
        if verdict is None or verdict is True:
            return None
        if verdict is False:
            return "unsupported (no reason given)"
        return str(verdict)


_kernels: dict = {}  # op -> the kernel a worker serves
_others: dict = {}  # op -> names of further kernels registered for it (a module of several variants)
_unavailable: list = []


def kernels() -> dict:
    return dict(_kernels)


def ambiguous() -> Optional[str]:
    """Why `serve()` cannot tell which kernel to serve (two kernels registered for one op), else None. A module
    may define several kernels of one op (a correct one and a variant, as a test suite does); a worker script
    serves one kernel per op, and `driftcheck.fuzz` serves the one it is given (serve_only)."""
    if not _others:
        return None
    return "; ".join(f"{len(names) + 1} kernels registered for {op} ({_kernels[op].fn.__name__}, "
                     f"{', '.join(names)}): a worker script serves one kernel per op" for op, names in
                     sorted(_others.items()))


def serve_only(kernel: "Kernel") -> None:
    """Makes `kernel` the only one this process serves (the worker `driftcheck.fuzz` starts)."""
    _kernels.clear()
    _others.clear()
    _kernels[kernel.op] = kernel


def unavailable(reason: str) -> None:
    """Marks this worker unavailable on this machine (torch too old, no GPU, a package missing): driftcheck
    reports the backend as unavailable with the reason instead of running it."""
    _unavailable.append(reason)


def unavailable_reason() -> Optional[str]:
    return "; ".join(_unavailable) if _unavailable else None


def _register(op: str, fn: Callable, tensors: str, device: str, supports) -> Kernel:
    if tensors not in TENSOR_KINDS:
        raise ValueError(f"@{op}: tensors must be one of {TENSOR_KINDS}, not '{tensors}'")
    if tensors == "numpy" and device != "cpu":
        raise ValueError(f"@{op}: NumPy kernels run on the CPU (device '{device}' given)")
    k = Kernel(op, fn, tensors, device, supports)
    if op in _kernels:
        _others.setdefault(op, []).append(fn.__name__)
    else:
        _kernels[op] = k
    return k


def _decorator(op: str):
    op_spec(op)

    def deco(fn: Optional[Callable] = None, *, tensors: str = "torch", device: str = "cpu", supports=None):
        if fn is not None:  # used bare: @dc.rmsnorm
            return _register(op, fn, tensors, device, supports)
        return lambda f: _register(op, f, tensors, device, supports)

    deco.__name__ = op
    deco.__doc__ = f"Registers the kernel for {op} (tensors: 'torch' or 'numpy'; device: torch device)."
    return deco


rmsnorm = _decorator("rmsnorm")
concat = _decorator("concat")
dual_rmsnorm_cat = _decorator("dual_rmsnorm_cat")
attention = _decorator("attention")

assert set(OPS) == {"rmsnorm", "concat", "dual_rmsnorm_cat", "attention"}
