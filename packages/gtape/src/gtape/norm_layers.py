"""``LayerNorm``, ``RMSNorm`` and ``GroupNorm`` as torch names and shapes them (parameters
``weight`` and ``bias`` of the normalised shape, initialised to ones and zeros): LayerNorm over
the last k axes (torch's ``normalized_shape``), RMSNorm over the last axis, GroupNorm per
channel.

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
from .norms import group_norm, layer_norm, normalized_axes, rms_norm
from .tape import Tape
from .var import Var


def _features(where: str, normalized_shape: int | Sequence[int],
              name: str = "normalized_shape") -> int:
    """The size of the last axis from torch's ``normalized_shape`` (an int or a 1-tuple)."""
    shape = normalized_shape
    if isinstance(shape, (list, tuple)) and len(shape) == 1:
        shape = shape[0]
    if isinstance(shape, bool) or not isinstance(shape, (int, np.integer)) or shape < 1:
        extra = " (normalisation over the last axis only)" if name == "normalized_shape" else ""
        raise ValueError(f"{where}: {name} is {normalized_shape!r}; expected an int >= 1"
                         f"{' or a 1-tuple' if extra else ''}{extra}")
    return int(shape)


def _eps(where: str, eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating)) or \
            not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{where}: eps is {eps!r}; expected a finite number >= 0")
    return float(eps)


class LayerNorm(Module):
    """``gtape.layer_norm`` over the last k axes (``normalized_shape``: an int or a tuple of
    the last axes' sizes) with torch's ``LayerNorm`` parameters: ``weight`` ones and ``bias``
    zeros of ``normalized_shape`` (none with ``elementwise_affine=False``; no bias with
    ``bias=False``)."""

    def __init__(self, tp: Tape, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True) -> None:
        self.normalized_shape = normalized_axes("LayerNorm", normalized_shape)
        self.eps = _eps("LayerNorm", eps)
        h = self.normalized_shape
        self.weight: Var | None = tp.param(np.ones(h)) if elementwise_affine else None
        self.bias: Var | None = tp.param(np.zeros(h)) if elementwise_affine and bias else None

    def forward(self, x: Any) -> Var:
        """layer_norm(x, weight, bias, eps) over the last len(normalized_shape) axes."""
        if len(self.normalized_shape) == 1:  # the last axis: the same nodes as before k axes
            return layer_norm(x, self.weight, self.bias, self.eps)
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

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


class GroupNorm(Module):
    """``gtape.group_norm`` with torch's ``GroupNorm(num_groups, num_channels)`` parameters:
    ``weight`` ones and ``bias`` zeros of shape (C,) (none with ``affine=False``)."""

    def __init__(self, tp: Tape, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True) -> None:
        self.num_groups = _features("GroupNorm", num_groups, "num_groups")
        self.num_channels = _features("GroupNorm", num_channels, "num_channels")
        if self.num_channels % self.num_groups:
            raise ValueError(f"GroupNorm: num_groups is {num_groups}, which does not divide "
                             f"num_channels {num_channels}; expected a divisor")
        self.eps = _eps("GroupNorm", eps)
        c = self.num_channels
        self.weight: Var | None = tp.param(np.ones(c)) if affine else None
        self.bias: Var | None = tp.param(np.zeros(c)) if affine else None

    def forward(self, x: Any) -> Var:
        """group_norm(x, num_groups, weight, bias, eps)."""
        if isinstance(x, Var) and (len(x.shape) < 2 or x.shape[1] != self.num_channels):
            raise ValueError(f"GroupNorm: x has shape {tuple(x.shape)}; expected (N, "
                             f"{self.num_channels}, *)")
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        """num_groups, num_channels, eps, affine."""
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
                f"affine={self.weight is not None}")
