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

from . import activations, attention, nn, operators, ops, rng, tensor_methods
from .activations import gelu, silu
from .attention import masked_fill, scaled_dot_product_attention
from .batchnorm import batch_norm
from .episode import EpisodeError
from .higher import grad
from .leaves import CONST, PARAM, STATE, Leaf
from .linalg import linear
from .losses import bce_with_logits, cross_entropy, mse
from .norms import group_norm, layer_norm, rms_norm
from .ops import *  # noqa: F403  (one function per gtensor op: gtape.ops.__all__)
from .params import ParamStore
from .rng import dropout, multinomial  # dropout(x, p, key): the key may be a host Key
from .shaping import cat, stack
from .tape import Mark, Node, Tape, TapeGrowthWarning
from .var import StaleVarError, Var
from .vision_layers import interpolate

# the packed attention with torch's arguments (gtape.ops.qkv_attention is its op, raw)
qkv_attention = attention.qkv_attention

# torch's Softplus(beta, threshold), over the op of that name (``gtape.ops.softplus``)
softplus = activations.softplus
operators.bind(Var)  # arithmetic, comparisons, @, indexing, T / sum / mean / reshape
tensor_methods.bind(Var)  # torch's tensor methods (transpose(d0, d1), view, split, ...)

__version__ = "0.1.0"
__all__ = [
    "CONST", "EpisodeError", "Leaf", "Mark", "Node", "PARAM", "ParamStore", "STATE",
    "StaleVarError", "Tape", "TapeGrowthWarning", "Var", "__version__", "batch_norm",
    "bce_with_logits", "cat", "cross_entropy", "dropout", "gelu", "grad", "group_norm",
    "interpolate", "layer_norm", "linear", "masked_fill", "mse", "multinomial", "nn",
    "qkv_attention", "rms_norm", "rng", "scaled_dot_product_attention", "silu", "softplus",
    "stack",
    *ops.__all__,
]
