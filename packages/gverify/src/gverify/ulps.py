"""Distances in units in the last place, and moving values by a number of ulps.

Floats are mapped to integers that keep their order (+0 and -0 both to 0): consecutive
floats are consecutive integers, so the distance of two floats is the difference of their
integers and moving by n ulps adds n.
"""

from __future__ import annotations

import numpy as np

_INT = {4: np.int32, 8: np.int64}


def _ordered(x: np.ndarray) -> np.ndarray:
    """The order-keeping integers of a float32/float64 array (int64)."""
    bits = 8 * x.dtype.itemsize
    b = np.ascontiguousarray(x).view(_INT[x.dtype.itemsize]).astype(np.int64)
    return np.where(b < 0, -(b & np.int64(2 ** (bits - 1) - 1)), b)


def _from_ordered(o: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The floats of ``dtype`` whose order-keeping integers are ``o`` (inverse of _ordered)."""
    if dtype.itemsize == 8:
        return np.where(o < 0, (-o) | np.int64(-(2 ** 63)), o).astype(np.int64).view(dtype)
    b = np.where(o < 0, (-o) | np.int64(2 ** 31), o).astype(np.uint32)
    return b.view(dtype)


def move(x: np.ndarray, ulps: int, element: int | None = None) -> np.ndarray:
    """A copy of ``x`` with every finite element (or only flat ``element``) moved by ``ulps``
    (stopping at +-inf; inf and NaN stay)."""
    out = np.array(x, order="C")  # a copy (ascontiguousarray would make a 0-d array 1-d)
    flat = out.reshape(-1)
    sel = np.arange(flat.size) if element is None else np.array([element])
    vals = flat[sel]
    finite = np.isfinite(vals)
    o = _ordered(vals[finite])
    top = int(_ordered(np.array([np.inf], x.dtype))[0])
    moved = np.clip(o + np.int64(ulps), -top, top)
    vals[finite] = _from_ordered(moved, x.dtype)
    flat[sel] = vals
    return out


def compare(a: np.ndarray, b: np.ndarray) -> tuple[int, float]:
    """(count of differing elements, max ulp distance) of two arrays of one float dtype and
    shape; NaN equals NaN (by class), NaN against a number is an infinite distance, -0 differs
    from +0 (at distance 0)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    na, nb = np.isnan(a), np.isnan(b)
    it = f"u{a.dtype.itemsize}"
    differ = (a.view(it) != b.view(it)) & ~(na & nb)
    count = int(differ.sum())
    if not count:
        return 0, 0
    if (na != nb).any():
        return count, float("inf")
    oa, ob = _ordered(a[differ]), _ordered(b[differ])
    k = int(np.argmax(np.abs(oa.astype(np.float64) - ob.astype(np.float64))))
    return count, abs(int(oa[k]) - int(ob[k]))
