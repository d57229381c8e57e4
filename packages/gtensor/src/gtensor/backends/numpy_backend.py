"""The numpy backend: every op runs its numpy reference (the definition)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..ops import Op
from .base import Backend

# The contract's floating-point mode (round to nearest, subnormals kept): the numpy backend
# checks it before every op (``dtypes.check_no_ftz``).


class NumpyBackend(Backend):
    """Reference backend on plain ``numpy.ndarray``."""

    name = "numpy"

    def asarray(self, x: Any, dtype: Any = None) -> np.ndarray:
        """A new C-contiguous float32/float64 numpy array holding ``x``."""
        if self._foreign(x):
            raise TypeError(f"asarray: got an array of another backend ({type(x).__name__}); "
                            "convert it with that backend's to_numpy first")
        dt = dtypes.infer(x, dtype)
        return np.array(x, dtype=dt, order="C", copy=True).view(np.ndarray)

    def _foreign(self, x: Any) -> bool:
        return type(x).__module__.split(".")[0] == "cupy" or type(x).__name__ == "SimArray"

    def to_numpy(self, a: Any) -> np.ndarray:
        """A numpy copy of ``a``."""
        self.check_array("to_numpy", "a", a)
        return np.array(a, order="C", copy=True)

    def zeros(self, shape: Sequence[int], dtype: Any = "float64") -> np.ndarray:
        """A new array of +0.0 (0 / False for int64 / bool)."""
        return np.zeros(tuple(shape), dtypes.normalize(dtype, "zeros", typed=True))

    def empty(self, shape: Sequence[int], dtype: Any) -> np.ndarray:
        """A new uninitialized array (float32, float64, int64 or bool)."""
        return np.empty(tuple(shape), dtypes.normalize(dtype, "empty", typed=True))

    def is_array(self, x: Any) -> bool:
        """Plain numpy arrays only (not the sim backend's subclass)."""
        return type(x) is np.ndarray

    def _execute(self, op: Op, inputs: list, out_shape: tuple, dtype: np.dtype,
                 attrs: dict, out: np.ndarray | None = None) -> np.ndarray:
        if dtypes.TINY * dtypes.ONE == 0.0:  # the hot path of dtypes.check_no_ftz
            dtypes.check_no_ftz(op.name)
        with np.errstate(all="ignore"):  # IEEE results (inf, nan) are the definition, not errors
            result = np.asarray(op.reference(*inputs, **attrs), dtype=dtype, order="C")
        if result.shape != out_shape:
            raise AssertionError(f"{op.name}: reference gave {result.shape}, expected {out_shape}")
        if out is None:
            return result
        np.copyto(out, result)
        return out
