"""The vision layers of issue 41 as torch names and shapes them: ``ConvTranspose2d``,
``AdaptiveAvgPool2d``, ``Upsample`` (nearest), and the ``interpolate`` function they use.

``interpolate(x, size=None, scale_factor=None, mode="nearest")`` is torch's nearest-neighbour
resize for integer factors: output (oy, ox) reads x[oy // sy, ox // sx], written as a
``reshape`` / ``broadcast_to`` / ``reshape`` of x (that composition is its definition: no
arithmetic), so its gradient is the engine's broadcast reduction -- per input element the
serial sum of its sy x sx block in row-major order.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> up = g.nn.Upsample(scale_factor=2)
>>> up(tp.const(np.arange(4.0).reshape(1, 1, 2, 2))).numpy()[0, 0].tolist()
[[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 3.0, 3.0], [2.0, 2.0, 3.0, 3.0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gtensor import describe

from . import ops
from .modules import Module
from .nn_init import KeyLike, kaiming_bound, layer_key, uniform_init
from .tape import Tape
from .var import Var


def _ints(where: str, name: str, v: Any, least: int) -> tuple[int, int]:
    """An int or a pair of ints, each >= ``least``, as a pair."""
    pair = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    if len(pair) != 2 or any(isinstance(n, bool) or not isinstance(n, (int, np.integer))
                             or n < least for n in pair):
        raise ValueError(f"{where}: {name} is {v!r}; expected an int >= {least} or a pair of "
                         "them")
    return int(pair[0]), int(pair[1])


def _factors(where: str, x: Var, size: Any, scale_factor: Any) -> tuple[int, int]:
    """The integer (sy, sx) of a nearest resize from ``size`` or ``scale_factor``."""
    if not isinstance(x, Var):
        raise TypeError(f"{where}: x is {describe(x)}; expected a Var of a Tape")
    if len(x.shape) != 4:
        raise ValueError(f"{where}: x has shape {tuple(x.shape)}; expected (N, C, H, W)")
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{where}: give exactly one of size and scale_factor")
    h, w = x.shape[2:]
    if size is not None:
        oh, ow = _ints(where, "size", size, 1)
        if oh % h or ow % w:
            raise ValueError(f"{where}: size {(oh, ow)} is not a multiple of the input's "
                             f"{(h, w)}; expected integer factors (nearest mode)")
        return oh // h, ow // w
    sf = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else (
        scale_factor, scale_factor)
    if len(sf) != 2 or any(isinstance(s, bool) or not isinstance(s, (int, float, np.number))
                           or s < 1 or float(s) != int(s) for s in sf):
        raise ValueError(f"{where}: scale_factor is {scale_factor!r}; expected integer "
                         "factors >= 1 (nearest mode), a number or a pair")
    return int(sf[0]), int(sf[1])


def interpolate(x: Var, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                align_corners: Any = None, recompute_scale_factor: Any = None) -> Var:
    """torch's ``F.interpolate`` in ``"nearest"`` mode with integer factors (module doc)."""
    where = "interpolate"
    if mode != "nearest":
        raise NotImplementedError(f"{where}: mode {mode!r} is not supported; expected "
                                  "'nearest'")
    if align_corners is not None:
        raise ValueError(f"{where}: align_corners is {align_corners!r}; nearest mode takes "
                         "None (torch's rule)")
    sy, sx = _factors(where, x, size, scale_factor)
    if (sy, sx) == (1, 1):
        return x
    n, c, h, w = x.shape
    y = ops.broadcast_to(ops.reshape(x, (n, c, h, 1, w, 1)), (n, c, h, sy, w, sx))
    return ops.reshape(y, (n, c, h * sy, w * sx))


class Upsample(Module):
    """torch's ``nn.Upsample(size=None, scale_factor=None, mode="nearest")`` (integer factors,
    ``interpolate``)."""

    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: Any = None, recompute_scale_factor: Any = None) -> None:
        if mode != "nearest":
            raise NotImplementedError(f"Upsample: mode {mode!r} is not supported; expected "
                                      "'nearest'")
        if (size is None) == (scale_factor is None):
            raise ValueError("Upsample: give exactly one of size and scale_factor")
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners = align_corners

    def forward(self, x: Any) -> Var:
        """interpolate(x, size, scale_factor, "nearest")."""
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners)

    def extra_repr(self) -> str:
        """size or scale_factor, mode."""
        what = f"size={self.size}" if self.size is not None else \
            f"scale_factor={self.scale_factor}"
        return f"{what}, mode='{self.mode}'"


class AdaptiveAvgPool2d(Module):
    """torch's ``nn.AdaptiveAvgPool2d(output_size)`` (``g.adaptive_avg_pool2d``; 1: global
    average pooling)."""

    def __init__(self, output_size: Any) -> None:
        vals = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,)
        if len(vals) not in (1, 2) or any(
                v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))
                                   or v < 1) for v in vals):
            raise ValueError(f"AdaptiveAvgPool2d: output_size is {output_size!r}; expected an "
                             "int >= 1 or a pair of them (None: the input's size)")
        self.output_size = output_size

    def forward(self, x: Any) -> Var:
        """adaptive_avg_pool2d(x, output_size)."""
        return ops.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        """output_size."""
        return f"output_size={self.output_size}"


class ConvTranspose2d(Module):
    """torch's ``nn.ConvTranspose2d`` (``g.conv_transpose2d``): weight (in, out/groups, kh,
    kw) U(-b, b) with torch's kaiming_uniform(a = sqrt 5) bound over fan_in = out/groups * kh
    * kw (torch computes it from the weight's second axis), bias (out,) U(-1/sqrt(fan_in),
    1/sqrt(fan_in)), drawn from ``key.split(2)`` (``key`` None: the tape's next key)."""

    def __init__(self, tp: Tape, in_channels: int, out_channels: int, kernel_size: Any,
                 stride: Any = 1, padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                 bias: bool = True, dilation: Any = 1, key: KeyLike | None = None) -> None:
        where = "ConvTranspose2d"
        self.in_channels = _ints(where, "in_channels", in_channels, 1)[0]
        self.out_channels = _ints(where, "out_channels", out_channels, 1)[0]
        self.kernel_size = _ints(where, "kernel_size", kernel_size, 1)
        self.stride = _ints(where, "stride", stride, 1)
        self.padding = _ints(where, "padding", padding, 0)
        self.output_padding = _ints(where, "output_padding", output_padding, 0)
        self.dilation = _ints(where, "dilation", dilation, 1)
        self.groups = _ints(where, "groups", groups, 1)[0]
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"{where}: groups is {self.groups}, which does not divide "
                             f"in_channels {self.in_channels} and out_channels "
                             f"{self.out_channels}")
        if any(o >= s for o, s in zip(self.output_padding, self.stride)):
            raise ValueError(f"{where}: output_padding {self.output_padding} is not smaller "
                             f"than the stride {self.stride}; expected output_padding < stride")
        kw, kb = layer_key(where, tp, key).split(2)
        fan_in = self.out_channels // self.groups * self.kernel_size[0] * self.kernel_size[1]
        shape = (self.in_channels, self.out_channels // self.groups, *self.kernel_size)
        self.weight = tp.param(uniform_init(kw, shape, kaiming_bound(fan_in)))
        self.bias: Var | None = (tp.param(uniform_init(kb, (self.out_channels,),
                                                       1.0 / np.sqrt(fan_in)))
                                 if bias else None)

    def forward(self, x: Any, output_size: Any = None) -> Var:
        """conv_transpose2d(x, weight, bias, stride, padding, output_padding, groups,
        dilation)."""
        if output_size is not None:
            raise NotImplementedError("ConvTranspose2d: output_size is not supported; give "
                                      "output_padding instead")
        return ops.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                    self.output_padding, self.groups, self.dilation)

    def extra_repr(self) -> str:
        """in, out, kernel_size, stride, padding, output_padding, groups, dilation, bias."""
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, output_padding="
                f"{self.output_padding}, groups={self.groups}, dilation={self.dilation}, "
                f"bias={self.bias is not None}")
