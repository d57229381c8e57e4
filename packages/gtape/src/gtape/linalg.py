"""Inner products of any rank, as torch spells them: ``matmul`` with torch.matmul's rules
(1-D operands, leading dims that broadcast) and ``linear`` (``x @ weight.T + bias`` for x of
shape (..., in)), composed from the 2-D ``matmul`` and 3-D ``bmm`` ops and movement ops.

Every output element is still one serial inner product in ascending k under the tape's
contract (``plain`` or ``fma``); the composition only decides which rows meet which columns:

* both operands 2-D: the ``matmul`` op; both 3-D with equal batch sizes: the ``bmm`` op;
* ``a`` of rank >= 3 and ``b`` 2-D (or 1-D): ``a``'s leading dims fold into rows, one ``matmul``
  (the op reads a (..., m, k) as the (P*m, k) it is in memory: no reshape copy) -- so the
  gradient of ``b`` is ONE inner product over all leading positions in row-major order (as a
  2-D product over the rows); with ``ta`` a's batch of transposes is copied first;
* otherwise the batch dims broadcast (numpy's rule): each operand is ``broadcast_to`` the batch
  shape where it differs, both are reshaped to 3-D, one ``bmm``, reshaped back. A broadcast
  operand's gradient is then the serial sum (``sum_to``, row-major over the broadcast batch
  positions) of its per-batch products;
* a 1-D ``a`` is read as (1, k), a 1-D ``b`` as (k, 1), and that axis is dropped from the
  result (torch's rule).

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> q = tp.const(np.ones((2, 3, 4, 5)))
>>> k = tp.const(np.ones((2, 3, 6, 5)))
>>> (q @ k.transpose(-2, -1)).shape
(2, 3, 4, 6)
>>> g.matmul(np.ones(5), q).shape
(2, 3, 4)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gtensor import describe
from gtensor.shapes import broadcast

from . import ops
from .var import Var


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if isinstance(x, Var) else tuple(np.shape(x))


def _swap(shape: tuple[int, ...], flag: bool) -> tuple[int, ...]:
    return (*shape[:-2], shape[-1], shape[-2]) if flag and len(shape) >= 2 else shape


def matmul_any(a: Any, b: Any, ta: bool = False, tb: bool = False) -> Var:
    """torch.matmul of ``op(a)`` and ``op(b)`` for operands of any rank >= 1 (``ta`` / ``tb``:
    that operand's last two axes swapped, for operands of rank >= 2). See the module doc."""
    sa, sb = _shape(a), _shape(b)
    for name, s, flag in (("a", sa, ta), ("b", sb, tb)):
        if len(s) == 0:
            raise ValueError(f"matmul: {name} is 0-d (shape ()); expected at least one axis "
                             "(torch.matmul refuses scalars: use *)")
        if flag and len(s) < 2:
            raise ValueError(f"matmul: t{name}=True but {name} has shape {s}; a transposed "
                             "operand needs at least two axes")
    if len(sa) == 2 and len(sb) == 2:
        return ops.apply("matmul", (a, b), ta=ta, tb=tb)
    if len(sa) == 3 and len(sb) == 3 and sa[0] == sb[0]:
        return ops.apply("bmm", (a, b), ta=ta, tb=tb)
    oa, ob = _swap(sa, ta), _swap(sb, tb)
    k_a = oa[-1]
    k_b = ob[0] if len(ob) == 1 else ob[-2]
    if k_a != k_b:
        raise ValueError(f"matmul: inner dimensions differ: a {sa}{' (ta=True)' if ta else ''} "
                         f"@ b {sb}{' (tb=True)' if tb else ''} (expected op(a).shape[-1] == "
                         f"op(b).shape[{0 if len(ob) == 1 else -2}])")
    if len(sa) == 1 or len(sb) == 1:  # (k,) as (1, k) or (k, 1); that axis is then dropped
        a2 = ops.reshape(a, (1, k_a)) if len(sa) == 1 else a
        b2 = ops.reshape(b, (k_b, 1)) if len(sb) == 1 else b
        y = matmul_any(a2, b2, ta=ta, tb=tb)
        out = y.shape[:-2] + (() if len(sa) == 1 else y.shape[-2:-1]) + (
            () if len(sb) == 1 else y.shape[-1:])
        return ops.reshape(y, out)
    if len(sb) == 2 and not ta:  # a's leading dims fold into rows: one 2-D product, in place
        return ops.apply("matmul", (a, b), ta=False, tb=tb)
    if len(sb) == 2:  # a read transposed: its batch of transposes copied, then folded
        a2 = ops.transpose(a, (*range(len(sa) - 2), len(sa) - 1, len(sa) - 2))
        return ops.apply("matmul", (a2, b), ta=False, tb=tb)
    try:
        batch = broadcast("matmul", oa[:-2], ob[:-2])
    except ValueError:
        raise ValueError(f"matmul: the batch dims of a {sa} and b {sb} do not broadcast "
                         f"({oa[:-2]} vs {ob[:-2]}; expected equal sizes or 1 per dim, "
                         "numpy's rule)") from None
    p = int(np.prod(batch, dtype=np.int64))
    a3 = _batched(a, sa, batch, p)
    b3 = _batched(b, sb, batch, p)
    y = ops.apply("bmm", (a3, b3), ta=ta, tb=tb)
    return ops.reshape(y, (*batch, oa[-2], ob[-1]))


def _batched(x: Any, shape: tuple[int, ...], batch: tuple[int, ...], p: int) -> Any:
    """``x`` (batch' + 2 trailing dims) broadcast to ``batch`` and reshaped to (p, r, c)."""
    full = (*batch, *shape[-2:])
    if shape != full:
        x = ops.broadcast_to(x, full)
    return x if len(full) == 3 else ops.reshape(x, (p, *shape[-2:]))


def linear(x: Any, weight: Any, bias: Any = None) -> Var:
    """torch's ``F.linear``: ``x @ weight.T + bias`` for x of shape (..., in), weight
    (out, in), bias (out,) or None. The leading dims of x fold into rows (one serial matmul
    reading x in place and the weight transposed in place, ``tb``: the same bits as
    ``x.reshape(-1, in) @ transpose(weight)``, reshaped back; the weight gradient is one inner
    product over every leading position, row-major), then the bias is one broadcast add."""
    sx, sw = _shape(x), _shape(weight)
    if len(sw) != 2:
        raise ValueError(f"linear: weight has shape {sw}; expected (out_features, in_features)")
    if len(sx) == 0 or sx[-1] != sw[1]:
        raise ValueError(f"linear: x has shape {sx}; expected (..., {sw[1]}) (the last axis "
                         f"the weight's in_features, weight {sw})")
    if bias is not None and _shape(bias) != (sw[0],):
        raise ValueError(f"linear: bias has shape {_shape(bias)}; expected ({sw[0]},) or None")
    if not isinstance(x, Var) and not isinstance(weight, Var):
        raise TypeError(f"linear: expected x or weight to be a Var of a Tape, got "
                        f"{describe(x)} and {describe(weight)}")
    x2 = ops.reshape(x, (1, sw[1])) if len(sx) == 1 else x
    y = ops.apply("matmul", (x2, weight), tb=True)  # (..., in) @ weight^T, read in place
    if bias is not None:
        y = ops.add(y, bias)
    return ops.reshape(y, (sw[0],)) if len(sx) == 1 else y
