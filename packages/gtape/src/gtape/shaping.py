"""torch's joining functions: ``cat`` (``concat`` with ``dim=``) and ``stack`` (a new axis).

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> a, b = tp.const(np.zeros((2, 3))), tp.const(np.ones((2, 3)))
>>> g.cat([a, b], dim=1).shape, g.stack([a, b], dim=0).shape
((2, 6), (2, 2, 3))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gtensor import describe

from . import ops
from .var import Var


def cat(tensors: Sequence[Any], dim: int = 0) -> Var:
    """Join along an existing axis ``dim`` (torch's ``cat``: ``concat(tensors, axis=dim)``)."""
    return ops.concat(list(tensors) if isinstance(tensors, tuple) else tensors, axis=dim)


def stack(tensors: Sequence[Any], dim: int = 0) -> Var:
    """Join along a new axis ``dim`` (torch's ``stack``): each input gets a size-1 axis there
    (a ``reshape``), then one ``concat``."""
    if isinstance(tensors, Var) or not isinstance(tensors, (list, tuple)) or not tensors:
        raise TypeError(f"stack: tensors is {describe(tensors)}; expected a non-empty list of "
                        "Vars")
    shapes = {tuple(t.shape) if isinstance(t, Var) else None for t in tensors}
    if len(shapes) != 1 or None in shapes:
        raise ValueError(f"stack: expected Vars of one shape, got shapes "
                         f"{[getattr(t, 'shape', None) for t in tensors]}")
    (shape,) = shapes
    nd = len(shape) + 1
    if isinstance(dim, bool) or not isinstance(dim, int) or not -nd <= dim < nd:
        raise IndexError(f"stack: dim {dim!r} is out of range for {nd} dims")
    d = dim % nd
    new = (*shape[:d], 1, *shape[d:])
    return ops.concat([ops.reshape(t, new) for t in tensors], axis=d)
