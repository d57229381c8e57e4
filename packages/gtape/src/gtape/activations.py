"""Activations as torch names them, composites of exact recorded ops with their order written
once (so every engine lands on the same bits and the backward passes are derived):

* ``gelu(x)`` (exact, torch's default)::   (x * 0.5) * (1 + erf(x * M_SQRT1_2))
  (the gate ``q = 1 + erf(x * M_SQRT1_2)`` is one gtensor op, ``gelu_gate``: the same roundings
  in one pass; its backward ``gelu_gate_grad`` is erf's and the scale's rules in one pass; the
  product ``(x * 0.5) * q`` is one op too, ``gelu_mul``, its backward ``(g * q) * 0.5`` for x
  and ``g * (x * 0.5)`` for q, one pass each. x's two contributions arrive the product's
  first, then the gate's: ``((g * q) * 0.5) + gelu_gate_grad(g * (x * 0.5), x)``)
* ``gelu(x, approximate="tanh")``::        x3 = (x * x) * x
                                           inner = BETA * (x + KAPPA * x3)
                                           (x * 0.5) * (1 + tanh(inner))
  with ``BETA = M_SQRT2 * M_2_SQRTPI * 0.5`` and ``KAPPA = 0.044715`` (torch's constants,
  rounded once to the tape's dtype);
* ``silu(x)``::                            x * sigmoid(x)
* ``softplus(x, beta=1, threshold=20)`` (torch's rule: x itself where beta * x > threshold)::
      bx = x * beta                        (skipped for beta == 1)
      y  = log1p(exp(where(bx > threshold, 0, bx))) / beta     (/ skipped for beta == 1)
      where(bx > threshold, x, y)
  the inner ``where`` keeps the unselected branch finite (so its zero gradient stays zero:
  no inf * 0). With torch's defaults (beta 1, threshold 20) it is the one gtensor op
  ``softplus`` (the same forward bits; its backward torch's ``(g * z) / (z + 1)``).

Products with a scalar are ``muls``, sums with one ``adds`` (each rounded once).

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> x = tp.const(np.array([-1.0, 0.0, 2.0]))
>>> [round(v, 6) for v in g.gelu(x, approximate="tanh").numpy().tolist()]
[-0.158808, 0.0, 1.954598]
>>> [round(v, 6) for v in g.silu(x).numpy().tolist()]
[-0.268941, 0.0, 1.761594]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gtensor import describe
from gtensor.ops.softplus import THRESHOLD as SOFTPLUS_THRESHOLD

from . import ops
from .var import Var

# C's <math.h> constants, as torch's GELU kernels spell them (each rounded once to the dtype)
M_SQRT1_2 = 0.70710678118654752440  # 1/sqrt(2)
M_SQRT2 = 1.41421356237309504880
M_2_SQRTPI = 1.12837916709551257390  # 2/sqrt(pi)
GELU_BETA = M_SQRT2 * M_2_SQRTPI * 0.5  # torch's kBeta, computed in float64 left to right
GELU_KAPPA = 0.044715
APPROXIMATE = ("none", "tanh")


def _var(where: str, x: Any) -> Var:
    if not isinstance(x, Var):
        raise TypeError(f"{where}: x is {describe(x)}; expected a Var of a Tape")
    return x


def gelu(x: Var, approximate: str = "none") -> Var:
    """torch's GELU: exact (``x/2 * (1 + erf(x/sqrt 2))``) or ``approximate="tanh"``, in the
    order of the module doc."""
    _var("gelu", x)
    if approximate not in APPROXIMATE:
        raise ValueError(f"gelu: approximate is {approximate!r}; expected one of {APPROXIMATE}")
    if approximate == "tanh":
        half = ops.muls(x, 0.5)
        x3 = ops.mul(ops.mul(x, x), x)
        inner = ops.muls(ops.add(x, ops.muls(x3, GELU_KAPPA)), GELU_BETA)
        return ops.mul(half, ops.adds(ops.tanh(inner), 1.0))
    # the gate 1 + erf(x * M_SQRT1_2), then (x * 0.5) * gate: one op each
    return ops.apply("gelu_mul", (x, ops.apply("gelu_gate", (x,))))


def silu(x: Var) -> Var:
    """torch's SiLU (swish): ``x * sigmoid(x)``."""
    return ops.mul(_var("silu", x), ops.sigmoid(x))


def real_arg(where: str, name: str, v: Any, positive: bool = False) -> float:
    """``v`` checked to be a finite real number (> 0 with ``positive``), as a float."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or \
            not math.isfinite(v) or (positive and v <= 0):
        raise ValueError(f"{where}: {name} is {v!r}; expected a finite real number"
                         f"{' > 0' if positive else ''}")
    return float(v)


def softplus(x: Var, beta: float = 1.0, threshold: float = SOFTPLUS_THRESHOLD) -> Var:
    """torch's Softplus: ``log1p(exp(beta * x)) / beta``, and x itself where beta * x >
    threshold (the module doc's order)."""
    _var("softplus", x)
    beta = real_arg("softplus", "beta", beta, positive=True)
    threshold = real_arg("softplus", "threshold", threshold)
    if beta == 1.0 and threshold == SOFTPLUS_THRESHOLD:  # torch's defaults: the one op
        return ops.apply("softplus", (x,))
    bx = x if beta == 1.0 else ops.muls(x, beta)
    over = ops.greater(bx, threshold)
    y = ops.log1p(ops.exp(ops.where(over, 0.0, bx)))
    if beta != 1.0:
        y = ops.div(y, np.asarray(beta, dtype=x.dtype))
    return ops.where(over, x, y)


__all__ = ["APPROXIMATE", "gelu", "silu", "softplus"]
