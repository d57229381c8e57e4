"""Losses built from recorded ops (so their backward passes are derived like any other).

Each is defined once, with its exact order of operations (the bits follow from it):

* ``mse(pred, t)``: ``mean(d * d)``, ``d = pred - t``;
* ``bce_with_logits(z, y)``: ``mean((pos - z * y) + log(exp(-a) + 1))``, ``pos`` = relu(z) and
  ``a`` = |z| written with ``where(z >= 0, ...)`` -- the stable form of
  ``-(y log s(z) + (1 - y) log(1 - s(z)))`` (as torch's BCEWithLogitsLoss);
* ``cross_entropy(logits, labels)``: ``-mean(take_along_axis(log_softmax(logits), labels))``
  for int class labels, one row per example (the labels are an int64 const of the tape); with
  ``ignore_index``, ``-(sum of the picked terms) / sum(index_weight(labels))``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gtensor import describe
from gtensor.ops.index import check_strict_ids

from . import const_roles, ops
from .var import Var

LABELS = "cross_entropy: labels"  # what the labels' check names (eager and replay alike)


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
    (stable for any magnitude): ``mean((pos - z * y) + log(exp(-a) + 1))`` with
    ``pos = where(z >= 0, z, 0)`` and ``a = where(z >= 0, z, -z)`` (= relu(z) and |z|, both
    taking the slope of the z >= 0 side at z = +-0, so the gradient is (sigmoid(z) - y) / N
    everywhere, z = 0 included)."""
    z = _check_pred("bce_with_logits", logits)
    _same_shape("bce_with_logits", z, target)
    up = ops.greater_equal(z, 0.0)
    margin = ops.sub(ops.where(up, z, 0.0), ops.mul(z, target))
    soft = ops.log(ops.adds(ops.exp(ops.neg(ops.where(up, z, ops.neg(z)))), 1.0))
    return ops.mean(ops.add(margin, soft))


def cross_entropy(logits: Var, labels: Any, ignore_index: int | None = None) -> Var:
    """Softmax cross-entropy of ``logits`` (rows, classes) against int ``labels`` (rows,) in
    [0, classes): ``-mean(take_along_axis(log_softmax(logits), labels))`` -- finite for finite
    logits at any margin. With ``ignore_index`` (as torch's), rows whose label equals it are
    left out: ``-(sum of the picked terms) / (count of the other rows)`` (0/0 = NaN when every
    row is ignored, as torch)."""
    z = _check_pred("cross_entropy", logits)
    if z.ndim != 2:
        raise ValueError(f"cross_entropy: logits have shape {z.shape}; expected (rows, classes)")
    if isinstance(labels, Var):
        raise TypeError("cross_entropy: labels is a Var; pass the int labels as host data (a "
                        "numpy array or list): they become an int64 const of the tape")
    y = np.asarray(labels)
    if y.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: labels have dtype {y.dtype}; expected int class "
                        "labels (int64)")
    if y.shape != (z.shape[0],):
        raise ValueError(f"cross_entropy: labels have shape {y.shape}; expected "
                         f"({z.shape[0]},): one int class label per row of logits")
    if ignore_index is not None and (isinstance(ignore_index, bool) or
                                     not isinstance(ignore_index, (int, np.integer))):
        raise TypeError(f"cross_entropy: ignore_index must be an int or None, got "
                        f"{describe(ignore_index)}")
    # the op's own check (take_along_axis with strict=LABELS), run here first so that bad
    # labels leave the tape unchanged; a captured program's set_input runs the op's check too
    check_strict_ids(LABELS, y, z.shape[1], ignore_index)
    ids = y.astype(np.int64).reshape(-1, 1)
    picked = ops.apply("take_along_axis", (ops.log_softmax(z, axis=-1), ids), axis=-1,
                       ignore=ignore_index, strict=LABELS)
    # the labels' const (recorded by take_along_axis) is named: a captured program lists it as
    # input "labels"; with ignore_index it feeds the count too (one input to refresh)
    tape = z.tape
    labels_var = const_roles.made_input(picked, 1)
    tape._names[labels_var.index] = (labels_var.serial, "labels")
    const_roles.mark(labels_var, const_roles.host_role(y))
    if ignore_index is None:
        return ops.neg(ops.mean(picked))
    count = ops.sum(ops.index_weight(labels_var, ignore_index))
    return ops.neg(ops.div(ops.sum(picked), count))
