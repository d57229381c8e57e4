"""gtape: a define-by-run autograd tape over gtensor, with backward passes derived from op rules.

>>> import numpy as np
>>> import gtape as g
>>> with g.Tape() as tp:
...     w = tp.param(np.array([1.0, -2.0]))
...     loss = g.sum(w * w)
...     tp.backward(loss)
...     tp.grad(w).tolist()
[2.0, -4.0]
"""

from __future__ import annotations

from . import nn, rng
from .episode import EpisodeError
from .higher import grad
from .leaves import CONST, PARAM, Leaf
from .losses import bce_with_logits, cross_entropy, mse
from .norms import layer_norm, rms_norm
from .ops import (
    abs,
    add,
    adds,
    apply,
    argmax,
    avg_pool2d,
    avg_pool2d_grad,
    bmm,
    broadcast_to,
    clip,
    concat,
    conv2d,
    conv2d_grad_input,
    conv2d_grad_weight,
    copy,
    div,
    embedding,
    equal,
    exp,
    greater,
    greater_equal,
    index_weight,
    less,
    less_equal,
    log,
    log_softmax,
    log_softmax_grad,
    logsumexp,
    matmul,
    max_pool2d,
    max_pool2d_grad,
    max_pool2d_pick,
    maximum,
    maximum_mask,
    mean,
    minimum,
    minimum_mask,
    mul,
    muls,
    neg,
    not_equal,
    pad,
    relu,
    relu_grad,
    reshape,
    rng_bits,
    rng_fold,
    rng_normal,
    rng_uniform,
    sigmoid,
    sigmoid_grad,
    slice,
    softmax,
    softmax_grad,
    sqrt,
    sub,
    sum,
    sum_to,
    take,
    take_along_axis,
    take_along_axis_grad,
    take_grad,
    tanh,
    tanh_grad,
    transpose,
    where,
)
from .rng import dropout
from .tape import Mark, Node, Tape, TapeGrowthWarning
from .var import StaleVarError, Var

__version__ = "0.1.0"
__all__ = [
    "CONST", "EpisodeError", "Leaf", "Mark", "Node", "PARAM", "StaleVarError", "Tape",
    "TapeGrowthWarning", "Var", "__version__",
    "abs", "add", "adds", "apply", "bce_with_logits", "bmm", "copy", "cross_entropy", "nn",
    "broadcast_to", "concat", "div", "exp", "grad", "log", "matmul", "maximum", "maximum_mask",
    "mean",
    "mse", "mul", "muls", "neg", "rng",
    "pad", "relu", "relu_grad", "reshape", "sigmoid", "sigmoid_grad", "slice", "softmax",
    "softmax_grad", "sqrt", "sub", "sum", "sum_to", "tanh", "tanh_grad", "transpose",
    "argmax", "clip", "embedding", "equal", "greater", "greater_equal", "index_weight", "less",
    "less_equal", "log_softmax", "log_softmax_grad", "logsumexp", "minimum", "minimum_mask",
    "not_equal",
    "take", "take_along_axis", "take_along_axis_grad", "take_grad", "where",
    "layer_norm", "rms_norm",
    "dropout", "rng_bits", "rng_fold", "rng_normal", "rng_uniform",
    "avg_pool2d", "avg_pool2d_grad", "conv2d", "conv2d_grad_input", "conv2d_grad_weight",
    "max_pool2d", "max_pool2d_grad", "max_pool2d_pick",
]
