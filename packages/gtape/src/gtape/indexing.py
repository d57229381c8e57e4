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


SUPPORTED = ("integers, step-1 slices and Ellipsis (basic indexing); one integer array "
             "(int64 ids of any shape, as g.take along axis 0), alone or among slices and "
             "integers (v[:, [-1], :]: g.take along its axis); one bool mask of the Var's "
             "leading axes (host data: the selected rows, as numpy)")


def getitem(v: Var, key: Any) -> Var:
    """``v[key]``: basic indexing (see the module doc), ``v[ids]`` (``take(v, ids, axis=0)``)
    or ``v[mask]`` for a host bool mask of v's leading axes (numpy's rule: ``take`` of v, its
    masked axes flattened, at the mask's true positions in row-major order)."""
    from .var import Var as _Var

    if isinstance(key, _Var) or (not isinstance(key, (tuple, slice, int, np.integer))
                                 and key is not Ellipsis and np.ndim(key) > 0):
        return _array_index(v, key)
    if isinstance(key, tuple) and any(isinstance(k, (list, np.ndarray, _Var)) for k in key):
        return _one_array_in_tuple(v, key)
    shape = v.shape
    out, keep = v, []
    for axis, (k, n) in enumerate(zip(_expand(key, len(shape)), shape)):
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer, slice)):
            raise TypeError(f"indexing: {k!r} at axis {axis} is not supported; supported: "
                            f"{SUPPORTED}")
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


def _one_array_in_tuple(v: Var, key: tuple) -> Var:
    """``v[:, ids, ...]``: one int index array among basic entries (numpy's rule for a single
    advanced index: its dims take the indexed axis' place) -- the basic part first (the array's
    axis kept whole), then ``take`` along that axis."""
    from .var import Var as _Var

    arrays = [i for i, k in enumerate(key) if isinstance(k, (list, np.ndarray, _Var))]
    if len(arrays) != 1:
        raise TypeError(f"indexing: {len(arrays)} index arrays in one key; supported: "
                        f"{SUPPORTED} and one int array among slices (v[:, [-1], :])")
    at = arrays[0]
    ids = key[at]
    if not isinstance(ids, _Var):
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"indexing: an index array of dtype {ids.dtype} is not supported; "
                            f"supported: {SUPPORTED}")
        ids = ids.astype(np.int64)
    if Ellipsis in key[:at]:
        raise TypeError("indexing: an Ellipsis before the index array is not supported; "
                        "spell the axes with ':'")
    ints = [i for i, k in enumerate(key) if isinstance(k, (int, np.integer))]
    block = sorted([*ints, at])
    if block != list(range(block[0], block[-1] + 1)):  # numpy moves the dims to the front then
        raise TypeError("indexing: integers and an index array separated by a slice are not "
                        "supported (numpy would move their dims to the front); index in two "
                        "steps")
    basic = getitem(v, key[:at] + (slice(None),) + key[at + 1:])
    axis = sum(1 for k in key[:at] if isinstance(k, slice))  # ints before it dropped their axes
    return ops.take(basic, ids, axis)


def _array_index(v: Var, key: Any) -> Var:
    """``v[ids]`` (int array or int64 Var) or ``v[mask]`` (host bool array of v's shape)."""
    from .var import Var as _Var

    if isinstance(key, _Var):
        if key.dtype != np.int64:
            raise TypeError(f"indexing: a Var index must be int64 ids (got {key.dtype}); "
                            f"supported: {SUPPORTED}")
        return ops.take(v, key, 0)
    arr = np.asarray(key)
    if arr.dtype == np.bool_:
        k = arr.ndim
        if arr.shape != v.shape[:k]:
            raise IndexError(f"indexing: the bool mask has shape {arr.shape}; expected the "
                             f"Var's leading axes {v.shape[:k] or v.shape} (as numpy)")
        rows = int(np.prod(v.shape[:k], dtype=np.int64))
        flat = v if k == 1 else ops.reshape(v, (rows, *v.shape[k:]))
        return ops.take(flat, np.flatnonzero(arr.reshape(-1)).astype(np.int64), 0)
    if arr.dtype.kind in "iu":
        if v.ndim == 0:
            raise IndexError("indexing: a 0-d Var cannot take an index array")
        return ops.take(v, arr.astype(np.int64), 0)
    raise TypeError(f"indexing: an index array of dtype {arr.dtype} is not supported; "
                    f"supported: {SUPPORTED}")


def power(v: Var, n: Any) -> Var:
    """``v ** n`` for an integer or +-0.5 constant ``n`` (see the module doc)."""
    from .operators import is_scalar

    if not is_scalar(n):
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
