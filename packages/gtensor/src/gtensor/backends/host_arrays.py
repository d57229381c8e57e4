"""Kernel backends whose arrays live in host memory (sim, cpu): each owns a numpy subclass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from .kernel_backend import KernelBackend


class HostArray(np.ndarray):
    """Base of the host kernel backends' array types (a distinct type per backend, so backends
    never mix); ``backend_name`` names the owner in error messages."""

    backend_name = ""


class HostKernelBackend(KernelBackend):
    """Array creation and checks shared by sim and cpu: arrays are ``array_type`` views."""

    array_type: type[HostArray] = HostArray

    def asarray(self, x: Any, dtype: Any = None) -> HostArray:
        """A new C-contiguous array of this backend holding ``x``."""
        if type(x).__module__.split(".")[0] == "cupy":
            raise TypeError("asarray: got a cupy array; convert it with the cuda backend's "
                            "to_numpy first")
        dt = dtypes.infer(x, dtype)
        return np.array(x, dtype=dt, order="C", copy=True).view(self.array_type)

    def to_numpy(self, a: Any) -> np.ndarray:
        """A plain numpy copy of ``a``."""
        self.check_array("to_numpy", "a", a)
        return np.array(a, order="C", copy=True).view(np.ndarray)

    def zeros(self, shape: Sequence[int], dtype: Any = "float64") -> HostArray:
        """A new array of +0.0 (0 / False for int64 / bool)."""
        dt = dtypes.normalize(dtype, "zeros", typed=True)
        return np.zeros(tuple(shape), dt).view(self.array_type)

    def empty(self, shape: Sequence[int], dtype: Any) -> HostArray:
        """A new uninitialized array (float32, float64, int64 or bool)."""
        dt = dtypes.normalize(dtype, "empty", typed=True)
        return np.empty(tuple(shape), dt).view(self.array_type)

    def is_array(self, x: Any) -> bool:
        """Arrays made by this backend."""
        return isinstance(x, self.array_type)

    def _prepare(self, x: HostArray) -> HostArray:
        return x if x.flags.c_contiguous else np.array(x, order="C").view(self.array_type)
