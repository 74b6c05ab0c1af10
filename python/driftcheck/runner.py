"""Runs a registered kernel on one case given as storages + views, independent of how the case arrived (the
worker protocol, exchange files, tests)."""

from __future__ import annotations

import time

from . import layout
from .api import Kernel, Unsupported
from .case import Case, Params
from .ops import op_spec


def make_params(op: str, values: dict) -> Params:
    """Params with every parameter of the op, typed; a missing one is an error. Keys this runner does not know
    are ignored (PROTOCOL.md: optional keys may be added within a protocol version)."""
    spec = op_spec(op)
    missing = set(spec.params) - set(values)
    if missing:
        raise ValueError(f"{op}: missing parameter(s) {', '.join(sorted(missing))}")
    return Params(**{k: t(values[k]) for k, t in spec.params.items()})


def metadata_case(op, params, storages, views, seed=0, index=0) -> Case:
    """A case without tensors, for supports()."""
    layout.check(storages, views)
    return Case(op, params, {v.name: v for v in views}, [s.dtype for s in storages], seed, index)


def _check_tensors(op: str, views) -> None:
    spec = op_spec(op)
    names = {v.name for v in views}
    required = (set(spec.inputs) | set(spec.outputs)) - set(spec.optional)
    missing = required - names
    if missing:
        raise ValueError(f"{op}: case lacks tensor(s) {', '.join(sorted(missing))}")
    unknown = names - set(spec.inputs) - set(spec.outputs)
    if unknown:
        raise ValueError(f"{op}: unknown tensor(s) {', '.join(sorted(unknown))}")


def supports(kernel: Kernel, case: Case):
    """None when the kernel takes the case, else the reason."""
    return kernel.check_supports(case)


def run(kernel: Kernel, case: Case, host_storages: list, arena=None, offsets=None) -> float:
    """Runs the kernel on `case` (a metadata case) with its storages' bytes in `host_storages` (writable NumPy
    arrays, one per storage, held as dtypes.numpy_dtype). When it returns, every storage's bytes in host memory
    are what the kernel left on its device. With `arena` (the uint8 array the storages live in) and their byte
    `offsets`, a device run copies all storages in one transfer each way. Raises Unsupported for a case the
    kernel declines at run time, any other exception for a kernel error. Returns the kernel's own time in
    milliseconds (device work included)."""
    views = list(case.specs.values())
    _check_tensors(case.op, views)
    host_views = layout.numpy_views(host_storages, views)
    reason = kernel.check_supports(case)
    if reason is not None:
        raise Unsupported(reason)
    if kernel.tensors == "numpy":
        # bf16 and fp8 views raise when assigned floats (NumPy holds them as raw codes): the mistake is named.
        guarded = layout.guard_raw_views(host_views, case.dtype)
        case.tensors, case._host = guarded, guarded
        start = time.perf_counter()
        kernel(case)
        return (time.perf_counter() - start) * 1e3
    import torch

    device = torch.device(kernel.device)
    specs = [layout.StorageSpec(d, len(h)) for d, h in zip(case.storage_dtypes, host_storages)]
    packed = device.type != "cpu" and arena is not None
    if packed:
        raw, lo, device_storages = layout.torch_storages_packed(arena, specs, offsets, device)
    else:
        device_storages = [layout.torch_storage(h, s, device) for h, s in zip(host_storages, specs)]
    case.tensors, case._host = layout.torch_views(device_storages, views), host_views
    start = time.perf_counter()
    kernel(case)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    kernel_ms = (time.perf_counter() - start) * 1e3
    if packed:
        layout.torch_copy_back_packed(raw, arena, lo)
    else:
        layout.torch_copy_back(device_storages, host_storages)
    return kernel_ms
