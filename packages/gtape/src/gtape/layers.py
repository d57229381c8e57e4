"""Layers of issue 21 as torch names and shapes them, initialised from ``gtape.rng``:
``Conv2d``, ``MaxPool2d``, ``AvgPool2d``, ``Dropout``, ``Embedding``.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> emb = g.nn.Embedding(tp, 10, 4, key=g.rng.key(0))
>>> emb(np.array([[1, 2], [3, 1]])).shape, emb.weight.shape
((2, 2, 4), (10, 4))
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gtensor import philox
from gtensor.ops.random import FOLD_TAG

from . import const_roles, ops
from .modules import Module
from .nn_init import KeyLike, as_key, kaiming_bound, layer_key, normal_init, uniform_init
from .rng import Key, OwnedKey, dropout
from .tape import Tape
from .var import Var


def _positive(where: str, name: str, n: Any, least: int = 1) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < least:
        raise ValueError(f"{where}: {name} is {n!r}; expected an int >= {least}")
    return int(n)


def _pair(where: str, name: str, n: Any, least: int = 1) -> tuple[int, int]:
    """An int (used for both spatial axes) or a pair of ints, each >= ``least``, as a pair."""
    pair = tuple(n) if isinstance(n, (tuple, list)) else (n, n)
    if len(pair) != 2:
        raise ValueError(f"{where}: {name} is {n!r}; expected an int or a pair of ints")
    for v in pair:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
            raise ValueError(f"{where}: {name} is {n!r}; expected an int >= {least} or a "
                             f"pair of them")
    return int(pair[0]), int(pair[1])


class Conv2d(Module):
    """``g.conv2d(x, weight, bias, stride, padding, dilation, groups)`` on NCHW input, torch's
    ``nn.Conv2d`` (kernel_size, stride, padding, dilation: an int or a pair; kept as pairs, as
    torch): weight (out, in/groups, kh, kw) U(-b, b) with torch's kaiming_uniform(a = sqrt 5)
    bound (``kaiming_bound(fan_in)``, fan_in = in/groups * kh * kw) and bias (out,)
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), drawn from ``key.split(2)`` (weight, bias) by
    ``gtape.nn_init.uniform_init`` (``key`` None: the tape's next key)."""

    dilation: tuple[int, int] = (1, 1)  # class defaults: layers made before these options
    groups: int = 1

    def __init__(self, tp: Tape, in_channels: int, out_channels: int, kernel_size: Any,
                 stride: Any = 1, padding: Any = 0, bias: bool = True,
                 key: KeyLike | None = None, dilation: Any = 1, groups: int = 1) -> None:
        self.in_channels = _positive("Conv2d", "in_channels", in_channels)
        self.out_channels = _positive("Conv2d", "out_channels", out_channels)
        self.kernel_size = _pair("Conv2d", "kernel_size", kernel_size)
        self.stride = _pair("Conv2d", "stride", stride)
        self.padding = _pair("Conv2d", "padding", padding, least=0)
        self.dilation = _pair("Conv2d", "dilation", dilation)
        self.groups = _positive("Conv2d", "groups", groups)
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"Conv2d: groups is {groups}, which does not divide in_channels "
                             f"{in_channels} and out_channels {out_channels}")
        kw, kb = layer_key("Conv2d", tp, key).split(2)
        fan_in = self.in_channels // self.groups * self.kernel_size[0] * self.kernel_size[1]
        shape = (self.out_channels, self.in_channels // self.groups, *self.kernel_size)
        self.weight = tp.param(uniform_init(kw, shape, kaiming_bound(fan_in)))
        self.bias: Var | None = (tp.param(uniform_init(kb, (self.out_channels,),
                                                       1.0 / np.sqrt(fan_in)))
                                 if bias else None)

    @classmethod
    def from_weights(cls, tp: Tape, weight: Any, bias: Any = None, stride: Any = 1,
                     padding: Any = 0) -> Conv2d:
        """A Conv2d holding copies of ``weight`` (out, in, kh, kw) and ``bias`` (out,) or
        None."""
        w = np.asarray(weight)
        if w.ndim != 4 or 0 in w.shape or w.dtype.kind not in "biuf":
            raise ValueError(f"Conv2d.from_weights: weight is {w.dtype} of shape {w.shape}; "
                             "expected real numbers of shape (out, in, kh, kw)")
        if bias is not None and np.shape(bias) != (w.shape[0],):
            raise ValueError(f"Conv2d.from_weights: bias has shape {np.shape(bias)}; expected "
                             f"({w.shape[0]},)")
        layer = cls.__new__(cls)
        layer.out_channels, layer.in_channels = int(w.shape[0]), int(w.shape[1])
        layer.kernel_size = (int(w.shape[2]), int(w.shape[3]))
        layer.stride = _pair("Conv2d", "stride", stride)
        layer.padding = _pair("Conv2d", "padding", padding, least=0)
        layer.weight = tp.param(w)
        layer.bias = None if bias is None else tp.param(bias)
        return layer

    def forward(self, x: Any) -> Var:
        """conv2d(x, weight, bias, stride, padding, dilation, groups)."""
        return ops.conv2d(x, self.weight, self.bias, stride=self.stride, padding=self.padding,
                          dilation=self.dilation, groups=self.groups)

    def extra_repr(self) -> str:
        """in, out, kernel_size, stride, padding, dilation and groups (when not 1), bias."""
        more = (f", dilation={self.dilation}" if self.dilation != (1, 1) else "") + (
            f", groups={self.groups}" if self.groups != 1 else "")
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}{more}, "
                f"bias={self.bias is not None}")


def _as_given(v: Any) -> int | tuple[int, int]:
    """An int stays an int, a pair becomes a tuple of ints (torch's pools keep what they get)."""
    return int(v) if isinstance(v, (int, np.integer)) else (int(v[0]), int(v[1]))


class _Pool2d(Module):
    """A 2-D pooling layer: kernel_size and stride (None: the kernel size), ints or pairs,
    padding (<= kernel // 2), and the options of ``OPTIONS`` (torch's names and defaults)."""

    OP: Any = None
    OPTIONS: dict[str, Any] = {}
    padding: Any = 0  # class defaults: layers made before these options

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 **options: Any) -> None:
        name = type(self).__name__
        _pair(name, "kernel_size", kernel_size)
        if stride is not None:
            _pair(name, "stride", stride)
        _pair(name, "padding", padding, least=0)
        bad = set(options) - set(self.OPTIONS)
        if bad:
            raise TypeError(f"{name}: unexpected option(s) {sorted(bad)}; expected "
                            f"{sorted(self.OPTIONS)}")
        self.kernel_size = _as_given(kernel_size)
        self.stride = None if stride is None else _as_given(stride)
        self.padding = _as_given(padding)
        for k, default in self.OPTIONS.items():
            setattr(self, k, options.get(k, default))

    def forward(self, x: Any) -> Var:
        """The pooling op on x (NCHW)."""
        extra = {k: getattr(self, k, d) for k, d in self.OPTIONS.items()}
        return type(self).OP(x, self.kernel_size, self.stride, self.padding, **extra)

    def extra_repr(self) -> str:
        """kernel_size, stride, padding and the options that differ from torch's defaults."""
        more = "".join(f", {k}={getattr(self, k, d)}" for k, d in self.OPTIONS.items()
                       if getattr(self, k, d) != d)
        pad = f", padding={self.padding}" if self.padding != 0 else ""
        return f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}" \
               f"{pad}{more}"


class MaxPool2d(_Pool2d):
    """``g.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)``, torch's
    ``nn.MaxPool2d`` (the first maximum of a window wins; its gradient goes there; padding
    never wins)."""

    OP = staticmethod(ops.max_pool2d)
    OPTIONS = {"dilation": 1, "ceil_mode": False}


class AvgPool2d(_Pool2d):
    """``g.avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad)``,
    torch's ``nn.AvgPool2d`` (no divisor_override)."""

    OP = staticmethod(ops.avg_pool2d)
    OPTIONS = {"ceil_mode": False, "count_include_pad": True}


IDS = "Embedding: ids"  # what the ids' check names (eager and replay alike)
FOLDS = 256  # Dropout computes its per-step keys this many at a time (one vectorized block call)


class Dropout(Module):
    """Inverted dropout, torch's ``nn.Dropout(p)``: in training mode ``g.dropout(x, p,
    key.fold(t))`` for the t-th training forward (t = 0, 1, ...: ``calls``), so every step
    draws a fresh mask that depends on (key, t, element) only; the identity in eval mode and
    when p == 0. A captured program refreshes its key input with ``prog.advance_keys()`` each
    step (which calls ``next_keys``: the program and the eager loop draw from one counter).

    The key: ``key`` (a Key or an int seed) when given; else ``tp.next_key()`` at construction
    when ``tp`` is given; else the next key of the input's tape at the first training forward
    (``bound``: False until then). Every Dropout therefore has its own key: two layers never
    draw the same masks. Assigning ``layer.key = k`` takes effect at the next forward.
    """

    def __init__(self, p: float = 0.5, key: KeyLike | None = None, *, tp: Tape | None = None
                 ) -> None:
        if isinstance(p, bool) or not isinstance(p, (int, float, np.floating)) or \
                not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p is {p!r}; expected a probability in [0, 1)")
        if tp is not None and not isinstance(tp, Tape):
            raise TypeError(f"Dropout: tp is {type(tp).__name__}; expected a gtape.Tape or None")
        self.p = float(p)
        self._key: Key | None = None
        self._folds: tuple[Key | None, int, np.ndarray] = (None, -1, np.zeros((0, 4), np.uint64))
        if key is not None:
            self.key = key
        elif tp is not None:
            self.key = tp.next_key()
        self.calls = 0  # training forwards so far: the next one uses key.fold(calls)

    @property
    def key(self) -> Key | None:
        """The layer's key (None until bound: see the class docstring)."""
        return self._key

    @key.setter
    def key(self, value: KeyLike) -> None:
        self._key = as_key("Dropout", value)  # the folds cached for another key are never read

    @property
    def bound(self) -> bool:
        """Whether the layer has its key (given, from ``tp``, or taken at a first forward)."""
        return self._key is not None

    def bind(self, tp: Tape) -> Key:
        """The layer's key, taking ``tp.next_key()`` first if it has none yet."""
        if self._key is None:
            self._key = tp.next_key()
        return self._key

    def next_key(self) -> Any:
        """The key of the next training forward (``key.fold(calls)``); counts it."""
        if self._key is None:
            raise RuntimeError("Dropout.next_key: the layer has no key yet (made without key= "
                               "or tp=); bind(tp) it or run a training forward first")
        t = self.calls
        owner, start, blocks = self._folds
        if owner != self._key or not 0 <= t - start < len(blocks):  # FOLDS folds, one call
            start = t
            ctr = np.zeros((FOLDS, 4), np.uint64)
            ctr[:, 0] = np.arange(t, t + FOLDS, dtype=np.uint64)
            ctr[:, 3] = FOLD_TAG
            blocks = philox.block(self._key.words, ctr)
            self._folds = (self._key, start, blocks)
        self.calls += 1
        b = blocks[t - start]
        # == self.key.fold(t) (the block at (t, 0, 0, 1)); owned: a captured program's
        # advance_keys draws this layer's next keys through next_keys, as a forward does
        return OwnedKey(int(b[0]), int(b[1]), self, t)

    def next_keys(self, n: int) -> list[Key]:
        """The keys of the next ``n`` training forwards (``next_key`` n times); counts them."""
        return [self.next_key() for _ in range(n)]

    def forward(self, x: Any) -> Var:
        """dropout(x, p, next_key()) in training mode; x in eval mode or when p == 0."""
        if not self.training or self.p == 0.0:
            return x
        if self._key is None:
            if not isinstance(x, Var):
                raise TypeError(f"Dropout: x is {type(x).__name__}; expected a Var (the layer "
                                "takes its key from the input's tape)")
            self.bind(x.tape)
        return dropout(x, self.p, self.next_key())

    def extra_repr(self) -> str:
        """p."""
        return f"p={self.p}"


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by int ids (``g.embedding``:
    a gather forward, a serial scatter-add backward), torch's ``nn.Embedding``; the weight
    N(0, 1) from ``key`` (``gtape.nn_init.normal_init``; None: the tape's next key).
    ``padding_idx`` and ``max_norm`` are not supported."""

    def __init__(self, tp: Tape, num_embeddings: int, embedding_dim: int,
                 key: KeyLike | None = None) -> None:
        self.tp = tp
        self.num_embeddings = _positive("Embedding", "num_embeddings", num_embeddings)
        self.embedding_dim = _positive("Embedding", "embedding_dim", embedding_dim)
        (kw,) = layer_key("Embedding", tp, key).split(1)
        self.weight = tp.param(normal_init(kw, (self.num_embeddings, self.embedding_dim)))

    def forward(self, ids: Any) -> Var:
        """weight[ids], ids in [0, num_embeddings) (torch's rule): host int ids (any shape)
        become an int64 const of the tape named "ids" (a per-shape constant when a ported
        forward made them itself, e.g. its position ids: ``gtape.const_roles``)."""
        if isinstance(ids, Var):
            return ops.apply("take", (self.weight, ids), axis=0, strict=IDS)
        a = np.asarray(ids)
        if a.dtype.kind not in "iu":
            raise TypeError(f"Embedding: ids have dtype {a.dtype}; expected int ids")
        # the op's check (strict=IDS) refuses ids outside [0, n) before anything is recorded
        out = ops.apply("take", (self.weight, a.astype(np.int64)), axis=0, strict=IDS)
        ids_var = const_roles.made_input(out, 1)
        ids_var.tape._names[ids_var.index] = (ids_var.serial, "ids")
        const_roles.mark(ids_var, const_roles.host_role(a))
        return out

    def extra_repr(self) -> str:
        """num_embeddings, embedding_dim."""
        return f"{self.num_embeddings}, {self.embedding_dim}"
