"""The sim backend: the CUDA kernels compiled with the system C++ compiler, run on the CPU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from .kernel_backend import KernelBackend


class SimArray(np.ndarray):
    """A numpy array owned by the sim backend (a distinct type, so backends never mix)."""


class SimBackend(KernelBackend):
    """Runs every op's CUDA source on the CPU (blocks one at a time, threads as fibers)."""

    name = "sim"

    def _build_module(self, source: str, kernels: tuple) -> Any:
        from ..runtime.sim import SimModule

        return SimModule(source, kernels)


    def asarray(self, x: Any, dtype: Any = None) -> SimArray:
        """A new C-contiguous sim array holding ``x``."""
        if type(x).__module__.split(".")[0] == "cupy":
            raise TypeError("asarray: got a cupy array; convert it with the cuda backend's "
                            "to_numpy first")
        dt = dtypes.infer(x, dtype)
        return np.array(x, dtype=dt, order="C", copy=True).view(SimArray)

    def to_numpy(self, a: Any) -> np.ndarray:
        """A plain numpy copy of ``a``."""
        self.check_input("to_numpy", "a", a)
        return np.array(a, order="C", copy=True).view(np.ndarray)

    def zeros(self, shape: Sequence[int], dtype: Any = "float64") -> SimArray:
        """A new array of +0.0."""
        return np.zeros(tuple(shape), dtypes.normalize(dtype, "zeros")).view(SimArray)

    def empty(self, shape: Sequence[int], dtype: Any) -> SimArray:
        """A new uninitialized array."""
        return np.empty(tuple(shape), dtype).view(SimArray)

    def is_array(self, x: Any) -> bool:
        """Arrays made by this backend."""
        return isinstance(x, SimArray)

    def _prepare(self, x: SimArray) -> SimArray:
        return x if x.flags.c_contiguous else np.array(x, order="C").view(SimArray)
