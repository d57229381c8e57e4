"""Kernel backends whose arrays live in host memory (sim, cpu): each owns a numpy subclass."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from .kernel_backend import KernelBackend

ALIGN = 64  # bytes: a cache line, one AVX-512 vector
ALIGN_FROM = 4096  # bytes: smaller arrays keep numpy's own allocation (and its speed)


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A new uninitialized C-contiguous array; from ALIGN_FROM bytes its data starts on an
    ALIGN-byte boundary, so the cpu kernels' whole-vector loads and stores of it never straddle
    a cache line (numpy's large arrays start 16 bytes into a page: 3-10% slower products and
    adds of 100 K elements)."""
    n = dtype.itemsize
    for d in shape:
        n *= d
    if n < ALIGN_FROM:
        return np.empty(shape, dtype)
    raw = np.empty(n + ALIGN, np.uint8)
    at = ctypes.addressof(ctypes.c_char.from_buffer(raw))  # (__array_interface__: 3x the time)
    return np.ndarray(shape, dtype, raw, -at % ALIGN)


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
        out = aligned_empty(tuple(shape), dt)
        out.fill(0)
        return out.view(self.array_type)

    def empty(self, shape: Sequence[int], dtype: Any) -> HostArray:
        """A new uninitialized array (float32, float64, int64 or bool)."""
        dt = dtypes.normalize(dtype, "empty", typed=True)
        return aligned_empty(tuple(shape), dt).view(self.array_type)

    def is_array(self, x: Any) -> bool:
        """Arrays made by this backend."""
        return isinstance(x, self.array_type)

    def _prepare(self, x: HostArray) -> HostArray:
        return x if x.flags.c_contiguous else np.array(x, order="C").view(self.array_type)
