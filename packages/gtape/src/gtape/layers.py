"""Layers of issue 21 as torch names and shapes them, initialised from ``gtape.rng``:
``Conv2d``, ``MaxPool2d``, ``Dropout``, ``Embedding``.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> emb = g.nn.Embedding(tp, 10, 4, key=g.rng.key(0))
>>> emb(np.array([[1, 2], [3, 1]])).shape, emb.weight.shape
((2, 2, 4), (10, 4))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ops
from .modules import Module
from .nn_init import KeyLike, as_key, kaiming_bound, normal_init, uniform_init
from .rng import dropout
from .tape import Tape
from .var import Var


def _positive(where: str, name: str, n: Any, least: int = 1) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < least:
        raise ValueError(f"{where}: {name} is {n!r}; expected an int >= {least}")
    return int(n)


def _square(where: str, name: str, n: Any, least: int = 1) -> int:
    """An int, or a pair of equal ints (torch's ``(k, k)``), >= ``least``."""
    if isinstance(n, (tuple, list)) and len(n) == 2 and n[0] == n[1]:
        n = n[0]
    if isinstance(n, (tuple, list)):
        raise ValueError(f"{where}: {name} is {n!r}; expected an int or a pair of equal ints "
                         "(square kernels, strides and paddings only)")
    return _positive(where, name, n, least)


class Conv2d(Module):
    """``g.conv2d(x, weight, bias, stride, padding)`` on NCHW input, torch's ``nn.Conv2d``:
    weight (out, in, k, k) and bias (out,), both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
    fan_in = in * k * k (torch's kaiming_uniform(a = sqrt 5) and bias rule), drawn from
    ``key.split(2)`` (weight, bias) by ``gtape.nn_init.uniform_init``."""

    def __init__(self, tp: Tape, in_channels: int, out_channels: int, kernel_size: Any,
                 stride: Any = 1, padding: Any = 0, bias: bool = True, key: KeyLike = 0) -> None:
        self.in_channels = _positive("Conv2d", "in_channels", in_channels)
        self.out_channels = _positive("Conv2d", "out_channels", out_channels)
        self.kernel_size = _square("Conv2d", "kernel_size", kernel_size)
        self.stride = _square("Conv2d", "stride", stride)
        self.padding = _square("Conv2d", "padding", padding, least=0)
        kw, kb = as_key("Conv2d", key).split(2)
        k = self.kernel_size
        fan_in = self.in_channels * k * k
        self.weight = tp.param(uniform_init(kw, (self.out_channels, self.in_channels, k, k),
                                            kaiming_bound(fan_in)))
        self.bias: Var | None = (tp.param(uniform_init(kb, (self.out_channels,),
                                                       1.0 / np.sqrt(fan_in)))
                                 if bias else None)

    def forward(self, x: Any) -> Var:
        """conv2d(x, weight, bias, stride, padding)."""
        return ops.conv2d(x, self.weight, self.bias, stride=self.stride,
                               padding=self.padding)

    def extra_repr(self) -> str:
        """in, out, kernel_size, stride, padding, bias."""
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, bias={self.bias is not None}")


class MaxPool2d(Module):
    """``g.max_pool2d(x, kernel_size, stride)`` (stride defaults to the kernel size), torch's
    ``nn.MaxPool2d`` without padding or dilation."""

    def __init__(self, kernel_size: Any, stride: Any = None) -> None:
        self.kernel_size = _square("MaxPool2d", "kernel_size", kernel_size)
        self.stride = None if stride is None else _square("MaxPool2d", "stride", stride)

    def forward(self, x: Any) -> Var:
        """max_pool2d(x, kernel_size, stride)."""
        return ops.max_pool2d(x, self.kernel_size, self.stride)

    def extra_repr(self) -> str:
        """kernel_size, stride."""
        return f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}"


class Dropout(Module):
    """Inverted dropout, torch's ``nn.Dropout(p)``: in training mode ``g.dropout(x, p,
    key.fold(t))`` for the t-th training forward (t = 0, 1, ...: ``calls``), so every step
    draws a fresh mask that depends on (key, t, element) only; the identity in eval mode and
    when p == 0. A captured step refreshes its key input with ``next_key()`` each step."""

    def __init__(self, p: float = 0.5, key: KeyLike = 0) -> None:
        if isinstance(p, bool) or not isinstance(p, (int, float, np.floating)) or \
                not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p is {p!r}; expected a probability in [0, 1)")
        self.p = float(p)
        self.key = as_key("Dropout", key)
        self.calls = 0  # training forwards so far: the next one uses key.fold(calls)

    def next_key(self) -> Any:
        """The key of the next training forward (``key.fold(calls)``); counts it."""
        k = self.key.fold(self.calls)
        self.calls += 1
        return k

    def forward(self, x: Any) -> Var:
        """dropout(x, p, next_key()) in training mode; x in eval mode or when p == 0."""
        if not self.training or self.p == 0.0:
            return x
        return dropout(x, self.p, self.next_key())

    def extra_repr(self) -> str:
        """p."""
        return f"p={self.p}"


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by int ids (``g.embedding``:
    a gather forward, a serial scatter-add backward), torch's ``nn.Embedding``; the weight
    N(0, 1) from ``key`` (``gtape.nn_init.normal_init``). ``padding_idx`` and ``max_norm`` are
    not supported."""

    def __init__(self, tp: Tape, num_embeddings: int, embedding_dim: int,
                 key: KeyLike = 0) -> None:
        self.tp = tp
        self.num_embeddings = _positive("Embedding", "num_embeddings", num_embeddings)
        self.embedding_dim = _positive("Embedding", "embedding_dim", embedding_dim)
        (kw,) = as_key("Embedding", key).split(1)
        self.weight = tp.param(normal_init(kw, (self.num_embeddings, self.embedding_dim)))

    def forward(self, ids: Any) -> Var:
        """weight[ids]: host int ids (any shape) become an int64 const of the tape."""
        if isinstance(ids, Var):
            return ops.embedding(self.weight, ids)
        a = np.asarray(ids)
        if a.dtype.kind not in "iu":
            raise TypeError(f"Embedding: ids have dtype {a.dtype}; expected int ids")
        if a.size and (a.min() < 0 or a.max() >= self.num_embeddings):
            raise ValueError(f"Embedding: ids must lie in [0, {self.num_embeddings}); got "
                             f"[{a.min()}, {a.max()}]")
        return ops.embedding(self.weight, self.tp.const(a.astype(np.int64), name="ids",
                                                       dtype="int64"))

    def extra_repr(self) -> str:
        """num_embeddings, embedding_dim."""
        return f"{self.num_embeddings}, {self.embedding_dim}"
