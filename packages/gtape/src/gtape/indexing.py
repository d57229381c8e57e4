"""``v[...]`` and ``v ** n`` for Vars, spelled with recorded ops (so they differentiate).

Indexing: basic indexing only -- integers and slices with step 1 (``v[2]``, ``v[1:4]``,
``v[:, -3:]``, ``v[..., 0]``): each sliced axis is one ``slice`` op, integer axes are then
dropped by one ``reshape``. Powers: integer exponents are repeated multiplication, left to
right (``x ** 3 == (x * x) * x``, bitwise), negative ones its reciprocal, ``x ** 0.5`` is
``sqrt(x)``; ``x ** 0`` is a const of ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import ops

if TYPE_CHECKING:
    from .var import Var


def _expand(key: Any, ndim: int) -> list[Any]:
    """The key as one entry per axis (Ellipsis expanded, missing trailing axes as ``:``)."""
    items = list(key) if isinstance(key, tuple) else [key]
    if sum(k is Ellipsis for k in items) > 1:
        raise IndexError("indexing: at most one Ellipsis (...) is allowed")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        fill = ndim - (len(items) - 1)
        items = items[:at] + [slice(None)] * max(fill, 0) + items[at + 1:]
    if len(items) > ndim:
        raise IndexError(f"indexing: {len(items)} indices for a Var of {ndim} dimensions")
    return items + [slice(None)] * (ndim - len(items))


def getitem(v: Var, key: Any) -> Var:
    """``v[key]`` for integers and step-1 slices (see the module doc)."""
    shape = v.shape
    out, keep = v, []
    for axis, (k, n) in enumerate(zip(_expand(key, len(shape)), shape)):
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer, slice)):
            raise TypeError(f"indexing: {k!r} at axis {axis} is not supported; expected ints "
                            "and slices with step 1 (basic indexing; use g.slice / g.concat "
                            "for more)")
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step != 1:
                raise TypeError(f"indexing: slice {k!r} at axis {axis} has step {step}; only "
                                "step 1 is supported")
            stop = max(stop, start)
            if (start, stop) != (0, n):
                out = ops.slice(out, axis, start, stop)
            keep.append(stop - start)
            continue
        i = int(k) + n if k < 0 else int(k)
        if not 0 <= i < n:
            raise IndexError(f"indexing: index {int(k)} is out of range for axis {axis} of "
                             f"size {n} (shape {shape})")
        out = ops.slice(out, axis, i, i + 1)
    new_shape = tuple(keep)
    return out if out.shape == new_shape else ops.reshape(out, new_shape)


def power(v: Var, n: Any) -> Var:
    """``v ** n`` for an integer or +-0.5 constant ``n`` (see the module doc)."""
    from .var import _is_scalar

    if not _is_scalar(n):
        raise TypeError(f"**: the exponent must be a constant number, got {type(n).__name__}; "
                        "for a Var exponent use g.exp(y * g.log(x))")
    n = float(n)
    if n == 0.5:
        return ops.sqrt(v)
    if n == -0.5:
        return 1.0 / ops.sqrt(v)
    if n != int(n) or abs(n) > 64:
        raise ValueError(f"**: exponent {n!r} is not supported; expected an integer with "
                         "|n| <= 64 or +-0.5 (e.g. g.exp(n * g.log(x)) for x > 0)")
    k = int(n)
    if k == 0:
        return v.tape.const(np.ones(v.shape))
    out = v
    for _ in range(abs(k) - 1):
        out = out * v
    return out if k > 0 else 1.0 / out
