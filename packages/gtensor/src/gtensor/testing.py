"""Helpers for bitwise comparisons in tests (used by every package's test suite)."""

from __future__ import annotations

import numpy as np


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality with NaNs compared by class (any NaN equals any NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    ui = np.uint64 if a.dtype == np.float64 else np.uint32
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if not np.array_equal(nan_a, nan_b):
        return False
    keep = ~nan_a
    return bool(np.array_equal(a[keep].view(ui), b[keep].view(ui)))


def first_difference(a: np.ndarray, b: np.ndarray) -> str:
    """Describe where two arrays first differ (for failure messages)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    ui = np.uint64 if a.dtype == np.float64 else np.uint32
    same = (a.view(ui) == b.view(ui)) | (np.isnan(a) & np.isnan(b))
    idx = np.argwhere(~same)
    if not len(idx):
        return "no difference"
    i = tuple(idx[0])
    return f"first of {len(idx)} differences at {i}: {a[i]!r} ({a[i].tobytes().hex()}) vs " \
           f"{b[i]!r} ({b[i].tobytes().hex()})"
