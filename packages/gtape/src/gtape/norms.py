"""Normalisations over the last axes, as composites of recorded ops (so every engine that runs
the ops lands on the same bits, and the backward passes are derived like any other).

Each is defined once, with its order of operations (every mean is the serial sum over the
normalised axes in row-major order, then ``/`` their element count):

* ``layer_norm(x, w, b, eps)`` over the last k axes (torch's ``normalized_shape``, k = 1 by
  default; torch's formula, biased variance)::

      mu  = mean(x)                 d = x - mu
      var = mean(d * d)             r = 1 / sqrt(var + eps)
      y   = (d * r) * w + b         (w, b of the normalised shape: skipped when None)

  over the last axis recorded as ``mean``, ``ln_normalize`` (the rest of the row in that order,
  one gtensor op; its backward one op too, the composite's bits), the weight's ``mul`` and the
  bias's ``add``;

* ``group_norm(x, G, w, b, eps)`` (torch's ``GroupNorm``): x (N, C, *) seen as (N, G, M),
  M = C/G times the spatial size, ``layer_norm`` over that last axis (so the serial sums run
  over (c, *) of the group in row-major order), then ``y * w + b`` per channel.

* ``rms_norm(x, w, eps)`` (Qwen2's / transformers' ``Qwen2RMSNorm``)::

      r = 1 / sqrt(mean(x * x) + eps)
      y = w * (x * r)               (w: skipped when None)

``r`` is one per row (kept as a size-1 last axis), so the per-element work is a product, as in
torch's kernels; the weight and bias broadcast along the rows and their gradients are the
serial column sums the engine's broadcast reduction defines.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> x = tp.param(np.array([[1.0, 2.0, 3.0, 4.0]]))
>>> np.round(g.layer_norm(x).numpy(), 6).tolist()
[[-1.341635, -0.447212, 0.447212, 1.341635]]
>>> np.round(g.rms_norm(x, eps=0.0).numpy(), 6).tolist()
[[0.365148, 0.730297, 1.095445, 1.460593]]
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np
from gtensor import describe

from . import ops
from .var import Var


def _check(where: str, x: Any, params: dict[str, Any], eps: Any, k: int = 1) -> None:
    """Refuse bad input before any node is recorded: x a Var (rank >= k), the last k axes not
    empty, each param None or of their shape, eps a finite number >= 0."""
    if not isinstance(x, Var):
        raise TypeError(f"{where}: x is {describe(x)}; expected a Var of a Tape")
    shape = x.shape
    if len(shape) < k or 0 in shape[len(shape) - k:]:
        raise ValueError(f"{where}: x has shape {tuple(shape)}; expected at least {k} axis"
                         f"{'es' if k > 1 else ''}, the last {k} (normalised over) not empty")
    want = tuple(shape[len(shape) - k:])
    for name, p in params.items():
        if p is not None and tuple(np.shape(p)) != want:
            raise ValueError(f"{where}: {name} has shape {tuple(np.shape(p))}; expected "
                             f"{want} (the last {k} axes of x, shape {tuple(shape)}) or None")
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating, np.integer)) or \
            not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{where}: eps is {eps!r}; expected a finite number >= 0")


def layer_norm_with(o: Any, x: Any, weight: Any = None, bias: Any = None,
                    eps: float = 1e-5, axis: int | tuple[int, ...] = -1) -> Any:
    """``layer_norm``'s formula over an ops namespace ``o`` (``gtape.ops``, or any with its
    signatures, e.g. gdemos' host ``ArrayOps``): the same ops in the same order, over ``axis``
    (the last one, or a tuple of the last k)."""
    mu = o.mean(x, axis=axis, keepdims=True)
    d = o.sub(x, mu)
    var = o.mean(o.mul(d, d), axis=axis, keepdims=True)
    y = o.mul(d, o.div(1.0, o.sqrt(o.adds(var, eps))))
    if weight is not None:
        y = o.mul(y, weight)
    if bias is not None:
        y = o.add(y, bias)
    return y


def rms_norm_with(o: Any, x: Any, weight: Any = None, eps: float = 1e-6) -> Any:
    """``rms_norm``'s formula over an ops namespace ``o`` (see ``layer_norm_with``)."""
    ms = o.mean(o.mul(x, x), axis=-1, keepdims=True)
    y = o.mul(x, o.div(1.0, o.sqrt(o.adds(ms, eps))))
    return y if weight is None else o.mul(weight, y)


_OPS: ModuleType = ops  # the tape's namespace: each op records one node


def normalized_axes(where: str, normalized_shape: Any) -> tuple[int, ...]:
    """torch's ``normalized_shape`` (an int or a tuple of ints >= 1) as a tuple."""
    shape = normalized_shape if isinstance(normalized_shape, (tuple, list)) \
        else (normalized_shape,)
    if not shape or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1
                        for n in shape):
        raise ValueError(f"{where}: normalized_shape is {normalized_shape!r}; expected an int "
                         ">= 1 or a non-empty tuple of them (the sizes of the last axes)")
    return tuple(int(n) for n in shape)


def _is_shape(v: Any) -> bool:
    """Whether ``v`` is a shape (an int, or a tuple / list of ints), not data."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return True
    return isinstance(v, (tuple, list)) and bool(v) and all(
        isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in v)


def layer_norm(x: Var, *args: Any, **kwargs: Any) -> Var:
    """Layer normalisation over the last axis or the last k axes, torch's
    ``F.layer_norm(x, normalized_shape, weight, bias, eps)``: ``((x - mu) * (1 / sqrt(var +
    eps))) * weight + bias`` with the biased variance, every mean a serial sum over the k axes
    in row-major order (the order in the module docstring).

    Two argument orders: torch's ``layer_norm(x, normalized_shape, weight=None, bias=None,
    eps=1e-5)`` (the second argument a shape: an int or a tuple of ints), and gtape's
    ``layer_norm(x, weight=None, bias=None, eps=1e-5)`` over the last axis (the second
    argument data or None; ``normalized_shape=`` by keyword). ``weight``/``bias``: Vars or
    data of the normalised shape, or None.
    """
    torch_order = bool(args) and _is_shape(args[0])
    names = ("normalized_shape", "weight", "bias", "eps") if torch_order else (
        "weight", "bias", "eps")
    if len(args) > len(names):
        raise TypeError(f"layer_norm: {len(args) + 1} positional arguments; expected at most "
                        f"{len(names) + 1} (x, {', '.join(names)})")
    got = {"normalized_shape": None, "weight": None, "bias": None, "eps": 1e-5}
    got.update(zip(names, args))
    for k, v in kwargs.items():
        if k not in got or k in names[:len(args)]:
            raise TypeError(f"layer_norm: unexpected or repeated argument {k!r}; expected "
                            "x, normalized_shape, weight, bias, eps")
        got[k] = v
    shape, weight, bias, eps = (got["normalized_shape"], got["weight"], got["bias"],
                                got["eps"])
    k = 1 if shape is None else len(normalized_axes("layer_norm", shape))
    _check("layer_norm", x, {"weight": weight, "bias": bias}, eps, k)
    if shape is not None and tuple(x.shape[len(x.shape) - k:]) != \
            normalized_axes("layer_norm", shape):
        raise ValueError(f"layer_norm: normalized_shape is {shape!r} but x has shape "
                         f"{tuple(x.shape)}; expected its last {k} axes")
    if k == 1:  # the last axis: the mean, then the rows' op (the composite's bits)
        mu = ops.mean(x, axis=-1, keepdims=True)
        y = ops.apply("ln_normalize", (x, mu), eps=float(eps))
        y = y if weight is None else ops.mul(y, weight)
        return y if bias is None else ops.add(y, bias)
    return layer_norm_with(_OPS, x, weight, bias, float(eps), tuple(range(-k, 0)))


def group_norm(x: Var, num_groups: int, weight: Any = None, bias: Any = None,
               eps: float = 1e-5) -> Var:
    """Group normalisation, torch's ``F.group_norm(x, G, w, b, eps)``: x (N, C, *) as
    (N, G, C/G * spatial) normalised over that last axis (``layer_norm``'s order: serial sums
    over each group's (c, *) row-major), reshaped back, then ``* w + b`` per channel
    (``weight``/``bias`` of shape (C,), or None)."""
    if not isinstance(x, Var):
        raise TypeError(f"group_norm: x is {describe(x)}; expected a Var of a Tape")
    shape = tuple(x.shape)
    if len(shape) < 2:
        raise ValueError(f"group_norm: x has shape {shape}; expected (N, C, *)")
    if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)) or \
            num_groups < 1 or shape[1] % num_groups:
        raise ValueError(f"group_norm: num_groups is {num_groups!r}; expected an int >= 1 "
                         f"dividing the {shape[1]} channels")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(np.shape(p)) != (shape[1],):
            raise ValueError(f"group_norm: {name} has shape {tuple(np.shape(p))}; expected "
                             f"({shape[1]},) (the channels of x, shape {shape}) or None")
    per = int(np.prod(shape[1:])) // int(num_groups)
    if per == 0:
        raise ValueError(f"group_norm: x has shape {shape}; expected non-empty groups")
    _check("group_norm", x, {}, eps)
    y = layer_norm_with(_OPS, _OPS.reshape(x, (shape[0], int(num_groups), per)), None, None,
                        float(eps))
    y = _OPS.reshape(y, shape)
    chan = (shape[1],) + (1,) * (len(shape) - 2)
    if weight is not None:
        y = _OPS.mul(y, _OPS.reshape(weight, chan) if isinstance(weight, Var)
                     else np.reshape(weight, chan))
    if bias is not None:
        y = _OPS.add(y, _OPS.reshape(bias, chan) if isinstance(bias, Var)
                     else np.reshape(bias, chan))
    return y


def rms_norm(x: Var, weight: Any = None, eps: float = 1e-6) -> Var:
    """RMS normalisation over the last axis, Qwen2's ``Qwen2RMSNorm``:
    ``weight * (x * (1 / sqrt(mean(x * x) + eps)))``. ``weight``: a Var or data of shape
    (H,), or None."""
    _check("rms_norm", x, {"weight": weight}, eps)
    return rms_norm_with(_OPS, x, weight, float(eps))
