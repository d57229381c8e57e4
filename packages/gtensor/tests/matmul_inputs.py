"""Inputs shared by the matmul tests: transposed copies and arrays with special values."""

from __future__ import annotations

import numpy as np


def swapped(x: np.ndarray) -> np.ndarray:
    """x with its last two axes swapped, as a new C-contiguous array."""
    return np.ascontiguousarray(np.swapaxes(x, -1, -2))


def with_specials(rng: np.random.Generator, shape: tuple, dtype, every: int) -> np.ndarray:
    """Normal values with NaN, infinities, signed zeros and huge / tiny values at about one
    position in ``every``."""
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    fi = np.finfo(dtype)
    picks = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, fi.max, -fi.tiny / 4, fi.max / 3,
                      fi.tiny], dtype=dtype)
    if flat.size:
        at = rng.integers(0, flat.size, size=max(1, flat.size // every))
        flat[at] = rng.choice(picks, size=at.size)
    return x
