"""A backend view over another backend's arrays (the Recorder, gtape's reused outputs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class ArraysOf:
    """Mixin: array creation, conversion and checks are ``self.inner``'s (a Backend)."""

    inner: Any

    def asarray(self, x: Any, dtype: Any = None) -> Any:
        """A new array of the inner backend holding ``x``."""
        return self.inner.asarray(x, dtype)

    def to_numpy(self, a: Any) -> np.ndarray:
        """A numpy copy of ``a``."""
        return self.inner.to_numpy(a)

    def zeros(self, shape: Sequence[int], dtype: Any = "float64") -> Any:
        """A new array of +0.0 (0 / False for int64 / bool)."""
        return self.inner.zeros(shape, dtype)

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:
        """A new uninitialized array (float32, float64, int64 or bool)."""
        return self.inner.empty(shape, dtype)

    def is_array(self, x: Any) -> bool:
        """Arrays of the inner backend."""
        return self.inner.is_array(x)

    def _prepare(self, x: Any) -> Any:
        return self.inner._prepare(x)

    def overlaps(self, a: Any, b: Any) -> bool:
        """The inner backend's ``overlaps``."""
        return self.inner.overlaps(a, b)

    def _upload(self, dst: Any, host: np.ndarray) -> None:
        self.inner._upload(dst, host)
