"""``LayerNorm`` and ``RMSNorm`` as torch names and shapes them (parameters ``weight`` and
``bias`` of shape (H,), initialised to ones and zeros), over the last axis only.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> ln = g.nn.LayerNorm(tp, 4)
>>> [(k, v.shape) for k, v in ln.named_parameters()]
[('weight', (4,)), ('bias', (4,))]
>>> ln(tp.const(np.arange(8.0).reshape(2, 4))).shape
(2, 4)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .modules import Module
from .norms import layer_norm, rms_norm
from .tape import Tape
from .var import Var


def _features(where: str, normalized_shape: int | Sequence[int]) -> int:
    """The size of the last axis from torch's ``normalized_shape`` (an int or a 1-tuple)."""
    shape = normalized_shape
    if isinstance(shape, (list, tuple)) and len(shape) == 1:
        shape = shape[0]
    if isinstance(shape, bool) or not isinstance(shape, (int, np.integer)) or shape < 1:
        raise ValueError(f"{where}: normalized_shape is {normalized_shape!r}; expected an int "
                         ">= 1 or a 1-tuple (normalisation over the last axis only)")
    return int(shape)


def _eps(where: str, eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating)) or \
            not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{where}: eps is {eps!r}; expected a finite number >= 0")
    return float(eps)


class LayerNorm(Module):
    """``gtape.layer_norm`` over the last axis with torch's ``LayerNorm`` parameters:
    ``weight`` ones and ``bias`` zeros of shape (H,) (none with ``elementwise_affine=False``;
    no bias with ``bias=False``)."""

    def __init__(self, tp: Tape, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True) -> None:
        self.normalized_shape = (_features("LayerNorm", normalized_shape),)
        self.eps = _eps("LayerNorm", eps)
        h = self.normalized_shape[0]
        self.weight: Var | None = tp.param(np.ones(h)) if elementwise_affine else None
        self.bias: Var | None = tp.param(np.zeros(h)) if elementwise_affine and bias else None

    def forward(self, x: Any) -> Var:
        """layer_norm(x, weight, bias, eps)."""
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        """normalized_shape, eps, elementwise_affine."""
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.weight is not None}")


class RMSNorm(Module):
    """``gtape.rms_norm`` over the last axis with torch's ``RMSNorm`` parameter: ``weight``
    ones of shape (H,) (none with ``elementwise_affine=False``). The default eps is Qwen2's
    1e-6 (torch's default, ``None``, means the dtype's machine epsilon: pass it explicitly)."""

    def __init__(self, tp: Tape, normalized_shape: int | Sequence[int], eps: float = 1e-6,
                 elementwise_affine: bool = True) -> None:
        self.normalized_shape = (_features("RMSNorm", normalized_shape),)
        self.eps = _eps("RMSNorm", eps)
        h = self.normalized_shape[0]
        self.weight: Var | None = tp.param(np.ones(h)) if elementwise_affine else None

    def forward(self, x: Any) -> Var:
        """rms_norm(x, weight, eps)."""
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        """normalized_shape, eps, elementwise_affine."""
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.weight is not None}")
