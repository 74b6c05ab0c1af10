"""The case a kernel receives: op, parameters, and its tensors with driftcheck's exact layout."""

from __future__ import annotations

import types

import numpy as np

from . import dtypes
from .layout import ViewSpec


class Params(types.SimpleNamespace):
    """The op's parameters by case.hpp's names (`eps`, `weight_mode` "plain"/"one_plus", `residual`;
    `num_q_heads`, `num_kv_heads`, `head_dim`, `block_size`, `scale`, `causal`, `window`, `softcap`, `k_scale`,
    `v_scale`, `has_sinks`)."""


class Case:
    """One case. Tensors are reached as attributes (`case.x`, `case.k_cache`) or `case["x"]`: torch tensors on
    the kernel's device or NumPy arrays, as the kernel asked, each a view of a whole storage. `case.host(name)`
    is always the NumPy view of the host copy (read scalars such as seq_lens there without a device sync).
    Outputs are preallocated views holding poison: write every element, and nothing else.

    In a `supports` call the case has metadata only: `specs`, `dtype()`, `shape()`, `contiguous()`, `params`; no
    tensors.
    """

    def __init__(self, op, params, specs, storage_dtypes, seed=0, index=0, tensors=None, host=None):
        self.op = op
        self.params = params
        self.specs = specs  # name -> ViewSpec
        self.storage_dtypes = storage_dtypes  # storage index -> dtype name
        self.seed = seed
        self.index = index
        self.tensors = tensors or {}
        self._host = host or {}

    def __getattr__(self, name):
        tensors = self.__dict__.get("tensors", {})
        if name in tensors:
            return tensors[name]
        raise AttributeError(f"{self.__dict__.get('op', 'case')} case has no tensor '{name}'")

    def __getitem__(self, name):
        try:
            return self.tensors[name]
        except KeyError:
            raise KeyError(f"{self.op} case has no tensor '{name}'") from None

    def has(self, name) -> bool:
        return name in self.specs

    def get(self, name, default=None):
        return self.tensors.get(name, default)

    def dtype(self, name) -> str:
        """driftcheck's dtype name of a tensor: bf16, fp16, fp32, fp64, fp8_e4m3fn, fp8_e4m3fnuz, fp8_e5m2, i32."""
        return self.storage_dtypes[self._spec(name).storage]

    def shape(self, name) -> tuple:
        return self._spec(name).shape

    def contiguous(self, name) -> bool:
        """Whether the view is row-major with no gaps (torch's is_contiguous()); known in a supports call."""
        return self._spec(name).contiguous()

    def aliases(self, a, b) -> bool:
        """True when two tensors are views of one storage (an in-place output, a residual aliased to x)."""
        return self._spec(a).storage == self._spec(b).storage

    def host(self, name) -> np.ndarray:
        return self._host[name]

    def load(self, name, dtype=np.float32) -> np.ndarray:
        """The tensor's exact values as a NumPy float array (contiguous copy of the host view)."""
        return dtypes.decode(self.host(name), self.dtype(name), dtype)

    def store(self, name, values, saturate=False) -> None:
        """Rounds float values once (nearest even) to the tensor's dtype and writes them into its view (NumPy
        kernels; torch kernels write with their own ops)."""
        view = self.tensors[name]
        if not isinstance(view, np.ndarray):
            raise TypeError("Case.store writes NumPy views; write torch tensors with copy_()")
        view[...] = dtypes.encode(np.asarray(values, dtype=np.float64), self.dtype(name), saturate)

    def describe(self) -> str:
        parts = [f"{n}: {self.dtype(n)}{list(s.shape)} strides {list(s.strides)} offset {s.offset}" for n, s in
                 self.specs.items()]
        return f"{self.op} case {self.seed}/{self.index} ({vars(self.params)}); " + "; ".join(parts)

    def _spec(self, name) -> ViewSpec:
        try:
            return self.specs[name]
        except KeyError:
            raise KeyError(f"{self.op} case has no tensor '{name}'") from None
