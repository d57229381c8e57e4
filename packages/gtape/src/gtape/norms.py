"""Normalisations over the last axis, as composites of recorded ops (so every engine that runs
the ops lands on the same bits, and the backward passes are derived like any other).

Each is defined once, with its order of operations (``H`` = the last axis' size; every mean is
the serial sum over the last axis in ascending order, then ``/ H``):

* ``layer_norm(x, w, b, eps)`` (torch's formula, biased variance)::

      mu  = mean(x)                 d = x - mu
      var = mean(d * d)             r = 1 / sqrt(var + eps)
      y   = (d * r) * w + b         (w, b: skipped when None)

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


def _check(where: str, x: Any, params: dict[str, Any], eps: Any) -> None:
    """Refuse bad input before any node is recorded: x a Var (rank >= 1), each param None or
    of shape (H,), eps a finite number >= 0."""
    if not isinstance(x, Var):
        raise TypeError(f"{where}: x is {describe(x)}; expected a Var of a Tape")
    shape = x.shape
    if len(shape) == 0 or shape[-1] == 0:
        raise ValueError(f"{where}: x has shape {tuple(shape)}; expected at least one axis, "
                         "the last one (normalised over) not empty")
    for name, p in params.items():
        if p is not None and tuple(np.shape(p)) != (shape[-1],):
            raise ValueError(f"{where}: {name} has shape {tuple(np.shape(p))}; expected "
                             f"({shape[-1]},) (the last axis of x, shape {tuple(shape)}) or None")
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating, np.integer)) or \
            not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{where}: eps is {eps!r}; expected a finite number >= 0")


def layer_norm_with(o: Any, x: Any, weight: Any = None, bias: Any = None,
                    eps: float = 1e-5) -> Any:
    """``layer_norm``'s formula over an ops namespace ``o`` (``gtape.ops``, or any with its
    signatures, e.g. gdemos' host ``ArrayOps``): the same ops in the same order."""
    mu = o.mean(x, axis=-1, keepdims=True)
    d = o.sub(x, mu)
    var = o.mean(o.mul(d, d), axis=-1, keepdims=True)
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


def layer_norm(x: Var, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Var:
    """Layer normalisation over the last axis, torch's ``F.layer_norm(x, (H,), w, b, eps)``:
    ``((x - mu) * (1 / sqrt(var + eps))) * weight + bias`` with the biased variance (the
    order in the module docstring). ``weight``/``bias``: Vars or data of shape (H,), or None."""
    _check("layer_norm", x, {"weight": weight, "bias": bias}, eps)
    return layer_norm_with(_OPS, x, weight, bias, float(eps))


def rms_norm(x: Var, weight: Any = None, eps: float = 1e-6) -> Var:
    """RMS normalisation over the last axis, Qwen2's ``Qwen2RMSNorm``:
    ``weight * (x * (1 / sqrt(mean(x * x) + eps)))``. ``weight``: a Var or data of shape
    (H,), or None."""
    _check("rms_norm", x, {"weight": weight}, eps)
    return rms_norm_with(_OPS, x, weight, float(eps))
