"""Storages and views as driftcheck hands them over, rebuilt in NumPy or PyTorch.

A case is a list of storages (a dtype and a number of elements, bytes given whole: guard bands, row padding and
poisoned KV slots included) and named views into them (shape, strides and offset in elements). Several views may
share a storage (an output aliasing its input). Rebuilding allocates each storage once, whole, and makes every
view with an as_strided call on it, so aliasing, padding and guards are exactly as driftcheck laid them out and
the whole storages go back after the kernel ran: out-of-bounds writes and modified inputs stay visible to the
oracle.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import dtypes


@dataclasses.dataclass(frozen=True)
class StorageSpec:
    dtype: str
    numel: int

    @property
    def nbytes(self) -> int:
        return self.numel * dtypes.itemsize(self.dtype)


@dataclasses.dataclass(frozen=True)
class ViewSpec:
    name: str
    storage: int
    shape: tuple
    strides: tuple  # elements
    offset: int  # elements

    def contiguous(self) -> bool:
        """Row-major with no gaps, as torch's is_contiguous() (size-1 and empty dimensions take any stride)."""
        if 0 in self.shape:
            return True
        expected = 1
        for n, st in reversed(list(zip(self.shape, self.strides))):
            if n != 1 and st != expected:
                return False
            expected *= n
        return True

    def extent(self) -> int:
        """One past the largest storage element the view touches (offset for an empty view)."""
        end = self.offset + 1
        for n, st in zip(self.shape, self.strides):
            if n == 0:
                return self.offset
            end += (n - 1) * st
        return end


def check(storages: list, views: list) -> None:
    """Raises ValueError naming the first view that does not fit its storage."""
    for v in views:
        if not 0 <= v.storage < len(storages):
            raise ValueError(f"view '{v.name}' names storage {v.storage} of {len(storages)}")
        if len(v.shape) != len(v.strides):
            raise ValueError(f"view '{v.name}' has {len(v.shape)} dims and {len(v.strides)} strides")
        if v.offset < 0 or min(v.shape, default=0) < 0 or min(v.strides, default=0) < 0:
            raise ValueError(f"view '{v.name}' has a negative size, stride or offset")
        extent, numel = v.extent(), storages[v.storage].numel
        if extent > numel:
            raise ValueError(f"view '{v.name}' reaches element {extent - 1} of storage {v.storage}, which has {numel}")


def numpy_storage(buffer, spec: StorageSpec, byte_offset: int = 0) -> np.ndarray:
    """A 1-D array over `buffer` (no copy), held as dtypes.numpy_dtype(spec.dtype)."""
    return np.frombuffer(buffer, dtype=dtypes.numpy_dtype(spec.dtype), count=spec.numel, offset=byte_offset)


def numpy_view(storage: np.ndarray, view: ViewSpec) -> np.ndarray:
    """The view as a strided array sharing `storage`'s memory (writes land in the storage). NumPy checks that
    it stays inside the storage."""
    if view.extent() == view.offset:  # empty view: nothing to address
        return np.empty(view.shape, dtype=storage.dtype)
    item = storage.itemsize
    return np.ndarray(view.shape, storage.dtype, buffer=storage, offset=view.offset * item,
                      strides=tuple(s * item for s in view.strides))


def numpy_views(storages: list, views: list) -> dict:
    return {v.name: numpy_view(storages[v.storage], v) for v in views}


class RawView(np.ndarray):
    """A NumPy view of a bf16 or fp8 tensor, which NumPy holds as raw uint16 / uint8 codes. Assigning float values
    to it (`case.y[...] = values`), which NumPy would cast to integer codes (0.7 -> 0, 1.6 -> 1), raises a
    TypeError naming the mistake instead: write case.store(name, values) or dtypes.encode(values, dtype). Integer
    codes (what encode returns) are written as they are. Everything else is a plain ndarray's behaviour."""

    def __array_finalize__(self, obj):
        self.dc_name = getattr(obj, "dc_name", None)
        self.dc_dtype = getattr(obj, "dc_dtype", None)

    def __setitem__(self, key, value):
        if self.dc_dtype is not None and self.dtype.kind == "u" and np.asarray(value).dtype.kind == "f":
            held = f"uint{8 * self.dtype.itemsize}"
            raise TypeError(
                f"{self.dc_name} is a raw {self.dc_dtype} view (NumPy holds {self.dc_dtype} as {held} bit patterns) "
                f"and was assigned {np.asarray(value).dtype} values, which NumPy would cast to integer codes: write "
                f"case.store(\"{self.dc_name}\", values) or dc.dtypes.encode(values, \"{self.dc_dtype}\")")
        super().__setitem__(key, value)


def guard_raw_views(views: dict, dtype_of) -> dict:
    """The same views, those of dtypes NumPy holds raw (bf16, fp8) as RawView. `dtype_of(name)` is the dtype."""
    out = {}
    for name, view in views.items():
        dtype = dtype_of(name)
        if dtypes.is_raw_in_numpy(dtype):
            view = view.view(RawView)
            view.dc_name, view.dc_dtype = name, dtype
        out[name] = view
    return out


def torch_storage(host: np.ndarray, spec: StorageSpec, device):
    """The storage as a 1-D torch tensor on `device`: on the CPU the host memory itself (no copy), elsewhere a
    whole copy on the device. fp8 without a native torch type stays raw uint8."""
    import torch

    dtype = dtypes.torch_dtype(spec.dtype)
    if spec.numel == 0:
        return torch.empty(0, dtype=dtype, device=device)
    cpu = torch.frombuffer(host, dtype=dtype, count=spec.numel)
    if torch.device(device).type == "cpu":
        return cpu
    return cpu.to(device, copy=True)


def torch_storages_packed(arena: np.ndarray, specs: list, offsets: list, device):
    """Every storage on `device` from one copy of the arena bytes they span (one host-to-device copy per case
    instead of one per storage). Returns (device bytes, first byte, [1-D storage tensors]); offsets are multiples
    of 64, so each storage's typed view is aligned."""
    import torch

    lo = min(offsets)
    hi = max(off + s.nbytes for s, off in zip(specs, offsets))
    raw = torch.frombuffer(arena, dtype=torch.uint8, count=hi - lo, offset=lo).to(device, copy=True)
    storages = [raw[off - lo : off - lo + s.nbytes].view(dtypes.torch_dtype(s.dtype)) for s, off in
                zip(specs, offsets)]
    return raw, lo, storages


def torch_copy_back_packed(raw, arena: np.ndarray, lo: int) -> None:
    import torch

    torch.frombuffer(arena, dtype=torch.uint8, count=raw.numel(), offset=lo).copy_(raw)


def torch_view(storage, view: ViewSpec):
    # as_strided's offset counts from the start of the underlying memory, not from the tensor's own first
    # element: a storage that is a slice of a packed copy starts at storage_offset().
    return storage.as_strided(view.shape, view.strides, storage.storage_offset() + view.offset)


def torch_views(storages: list, views: list) -> dict:
    return {v.name: torch_view(storages[v.storage], v) for v in views}


def torch_copy_back(device_storages: list, host_storages: list) -> None:
    """Copies whole device storages back into host memory (a no-op for storages that are the host memory)."""
    import torch

    for dev, host in zip(device_storages, host_storages):
        if dev.device.type == "cpu" or dev.numel() == 0:
            continue
        torch.frombuffer(host, dtype=dev.dtype, count=dev.numel()).copy_(dev)
