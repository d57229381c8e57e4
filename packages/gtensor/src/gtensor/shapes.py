"""Shape rules shared by the ops: broadcasting, axes, strides and dimension collapsing."""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

import numpy as np

Shape = tuple[int, ...]

MAX_RANK = 8


def broadcast(op: str, a: Shape, b: Shape) -> Shape:
    """numpy's broadcast of two shapes; ValueError naming ``op`` and both shapes otherwise."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and da != 1 and db != 1:
            raise ValueError(
                f"{op}: shapes {a} and {b} cannot be broadcast together "
                f"(dimension {-i}: {da} vs {db}; expected equal sizes or a 1)"
            )
        out.append(max(da, db) if da != 0 and db != 0 else 0)
    return tuple(reversed(out))


def check_rank(op: str, arg: str, shape: Shape) -> None:
    """Reject arrays of more than MAX_RANK dimensions."""
    if len(shape) > MAX_RANK:
        raise ValueError(
            f"{op}: {arg} has {len(shape)} dimensions; at most {MAX_RANK} are supported")


def normalize_axis(op: str, axis: object, ndim: int) -> int:
    """An int axis (Python or numpy) in ``[-ndim, ndim)`` made non-negative; errors name
    ``op``."""
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{op}: axis must be an int, got {type(axis).__name__} {axis!r}")
    axis = int(axis)
    if not -ndim <= axis < ndim:
        if not ndim:
            raise ValueError(f"{op}: axis {axis} is out of range for an array of 0 dimensions "
                             "(it has no axes)")
        raise ValueError(f"{op}: axis {axis} is out of range for an array of {ndim} dimensions "
                         f"(expected {-ndim} <= axis < {ndim})")
    return axis % ndim


def normalize_shape(op: str, shape: object) -> Shape:
    """A shape given as a tuple/list of non-negative ints (or one int)."""
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(d, int) and not isinstance(d, bool) for d in shape
    ):
        raise TypeError(f"{op}: shape must be a tuple of ints, got {shape!r}")
    return tuple(int(d) for d in shape)


def contiguous_strides(shape: Shape) -> Shape:
    """Row-major element strides of ``shape``."""
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def broadcast_strides(shape: Shape, out: Shape) -> Shape:
    """Element strides reading an array of ``shape`` broadcast to ``out`` (0 on broadcast axes)."""
    st = contiguous_strides(shape)
    lead = len(out) - len(shape)
    return tuple(
        0 if i < lead or shape[i - lead] == 1 and out[i] != 1 else st[i - lead]
        for i in range(len(out))
    )


def collapse(shape: Shape, *strides: Shape) -> tuple[Shape, list[Shape]]:
    """Merge adjacent dims that are contiguous in every stride set (drops size-1 dims).

    The visiting order of elements (row-major over ``shape``) is unchanged.
    """
    dims = [(d, [s[i] for s in strides]) for i, d in enumerate(shape) if d != 1]
    merged: list[tuple[int, list[int]]] = []
    for d, st in dims:
        if merged:
            pd, pst = merged[-1]
            if all(ps == s * d for ps, s in zip(pst, st)):
                merged[-1] = (pd * d, st)
                continue
        merged.append((d, st))
    if not merged:
        merged = [(1, [0 for _ in strides])]
    out_shape = tuple(d for d, _ in merged)
    return out_shape, [tuple(st[k] for _, st in merged) for k in range(len(strides))]


def size(shape: Sequence[int]) -> int:
    """Number of elements."""
    return prod(shape)
