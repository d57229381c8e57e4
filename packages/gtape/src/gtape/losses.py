"""Losses built from recorded ops (so their backward passes are derived like any other)."""

from __future__ import annotations

import numpy as np

from . import ops
from .convert import describe
from .var import Var


def mse(pred: Var, target: ops.Operand) -> Var:
    """mean((pred - target) * (pred - target)); ``target`` is a Var or data of pred's shape."""
    if not isinstance(pred, Var):
        raise TypeError(f"mse: pred is {describe(pred)}; expected a Var")
    tshape = target.shape if isinstance(target, Var) else tuple(np.shape(target))
    if tuple(tshape) != pred.shape:
        raise ValueError(f"mse: pred has shape {pred.shape} but target has shape "
                         f"{tuple(tshape)}; expected equal shapes")
    d = ops.sub(pred, target)
    return ops.mean(ops.mul(d, d))
