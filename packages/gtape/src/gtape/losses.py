"""Losses built from recorded ops (so their backward passes are derived like any other).

Each is defined once, with its exact order of operations (the bits follow from it):

* ``mse(pred, t)``: ``mean(d * d)``, ``d = pred - t``;
* ``bce_with_logits(z, y)``: ``mean((relu(z) - z * y) + log(exp(-|z|) + 1))`` -- the stable
  form of ``-(y log s(z) + (1 - y) log(1 - s(z)))`` (as torch's BCEWithLogitsLoss);
* ``cross_entropy(logits, labels)``: ``-mean(log(sum(softmax(logits) * onehot, axis=-1)))``
  for int class labels, one row per example: the label's probability is picked by a one-hot
  const (exact: the other terms are +0.0), then its log.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gtensor import describe

from . import ops
from .var import Var


def _check_pred(where: str, pred: Any) -> Var:
    if not isinstance(pred, Var):
        raise TypeError(f"{where}: pred is {describe(pred)}; expected a Var")
    return pred


def _same_shape(where: str, pred: Var, target: Any) -> None:
    tshape = target.shape if isinstance(target, Var) else tuple(np.shape(target))
    if tuple(tshape) != pred.shape:
        raise ValueError(f"{where}: pred has shape {pred.shape} but target has shape "
                         f"{tuple(tshape)}; expected equal shapes")


def mse(pred: Var, target: ops.Operand) -> Var:
    """mean((pred - target) * (pred - target)); ``target`` is a Var or data of pred's shape."""
    _same_shape("mse", _check_pred("mse", pred), target)
    d = ops.sub(pred, target)
    return ops.mean(ops.mul(d, d))


def bce_with_logits(logits: Var, target: ops.Operand) -> Var:
    """Binary cross-entropy of ``sigmoid(logits)`` against targets in [0, 1], from the logits
    (stable for any magnitude): ``mean((relu(z) - z * y) + log(exp(-|z|) + 1))``."""
    z = _check_pred("bce_with_logits", logits)
    _same_shape("bce_with_logits", z, target)
    margin = ops.sub(ops.relu(z), ops.mul(z, target))
    soft = ops.log(ops.adds(ops.exp(ops.neg(ops.abs(z))), 1.0))
    return ops.mean(ops.add(margin, soft))


def cross_entropy(logits: Var, labels: Any) -> Var:
    """Softmax cross-entropy of ``logits`` (rows, classes) against int ``labels`` (rows,):
    ``-mean(log(sum(softmax(logits) * onehot(labels), axis=-1)))``."""
    z = _check_pred("cross_entropy", logits)
    y = np.asarray(labels)
    if z.ndim != 2:
        raise ValueError(f"cross_entropy: logits have shape {z.shape}; expected (rows, classes)")
    if y.dtype.kind not in "iu" or y.shape != (z.shape[0],):
        raise ValueError(f"cross_entropy: labels have shape {y.shape} and dtype {y.dtype}; "
                         f"expected {z.shape[0]} int class labels")
    if y.size and (y.min() < 0 or y.max() >= z.shape[1]):
        raise ValueError(f"cross_entropy: labels must lie in [0, {z.shape[1]}); got "
                         f"[{y.min()}, {y.max()}]")
    onehot = np.zeros(z.shape)
    onehot[np.arange(len(y)), y] = 1.0
    probs = ops.softmax(z, axis=-1)
    # the one-hot is a named const (a captured program lists it as input "labels"), recorded
    # where the mul would have recorded it: the node order is unchanged
    picked = ops.sum(ops.mul(probs, logits.tape.const(onehot, name="labels")), axis=-1)
    return ops.neg(ops.mean(ops.log(picked)))
