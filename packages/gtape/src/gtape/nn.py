"""Layers in the spirit of ``torch.nn``: modules whose parameters are registered on a tape,
named and shaped as torch names and shapes them, with torch's seeded initialisers.

Convention (torch's): ``Linear`` holds ``weight`` of shape (out, in) and ``bias`` of shape
(out,), and computes ``y = x @ weight.T + bias``. The initial values are the same draws as
before this layout (a (in, out) draw, stored transposed), so outputs and trained values are
bit for bit those of the (in, out) layout, the weight read transposed.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> mlp = g.nn.MLP(tp, [3, 8, 1], seed=0)
>>> y = mlp(tp.const(np.ones((5, 3))))
>>> y.shape, len(mlp.params), mlp.layers[0].weight.shape
((5, 1), 4, (8, 3))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import nn_init as init  # torch.nn.init's names: g.nn.init.normal_(p, std, key=...)
from . import ops
from .containers import ModuleDict, ModuleList
from .layers import AvgPool2d, Conv2d, Dropout, Embedding, MaxPool2d
from .linalg import linear
from .modules import Flatten, Identity, IncompatibleKeys, Module, ReLU, Sequential, Sigmoid, Tanh
from .nn_init import KeyLike, kaiming_bound, layer_key, normal_init, uniform_init
from .norm_layers import GroupNorm, LayerNorm, RMSNorm
from .state import load, save
from .tape import Tape
from .var import Var

__all__ = [
    "ACTIVATIONS", "AdaptiveAvgPool2d", "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Conv2d",
    "ConvTranspose2d", "Dropout", "Embedding", "Flatten", "GELU", "GroupNorm", "INITS",
    "Identity", "IncompatibleKeys", "LayerNorm", "Linear", "MLP", "MaxPool2d", "Module",
    "ModuleDict", "ModuleList", "MultiheadAttention", "RMSNorm", "ReLU", "Sequential", "SiLU",
    "Sigmoid", "Softplus", "Tanh", "from_torch", "init", "kaiming_bound", "kaiming_uniform",
    "Upsample", "load", "normal_init", "save", "uniform_init", "xavier_uniform",
]

Seed = int | np.random.Generator


def _rng(seed: Seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TypeError(f"seed must be an int >= 0 or a numpy Generator, got {seed!r}")
    return np.random.default_rng(int(seed))


def kaiming_uniform(fan_in: int, fan_out: int, seed: Seed = 0,
                    a: float = math.sqrt(5.0)) -> np.ndarray:
    """(fan_in, fan_out) draws of U(-bound, bound), ``bound = sqrt(2 / (1 + a^2)) *
    sqrt(3 / fan_in)``: torch's ``kaiming_uniform_(a)``; the default ``a = sqrt(5)`` (what
    ``torch.nn.Linear`` uses) gives ``bound = 1 / sqrt(fan_in)``."""
    bound = math.sqrt(2.0 / (1.0 + a * a)) * math.sqrt(3.0 / fan_in)
    return _rng(seed).uniform(-bound, bound, (fan_in, fan_out))


def xavier_uniform(fan_in: int, fan_out: int, seed: Seed = 0, gain: float = 1.0) -> np.ndarray:
    """(fan_in, fan_out) draws of U(-bound, bound), ``bound = gain * sqrt(6 / (fan_in +
    fan_out))``: torch's ``xavier_uniform_`` (Glorot)."""
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return _rng(seed).uniform(-bound, bound, (fan_in, fan_out))


INITS: dict[str, Callable[..., np.ndarray]] = {"kaiming": kaiming_uniform,
                                                "xavier": xavier_uniform}


class Linear(Module):
    """``y = x @ weight.T + bias``: weight (out, in) and bias (out,) params of ``tp``, as torch.

    Initialisation as ``torch.nn.Linear``: the weight by ``kaiming_uniform`` (a = sqrt 5), the
    bias uniform in ``(-1/sqrt(in), 1/sqrt(in))``; ``init="xavier"`` draws the weight by
    ``xavier_uniform`` and sets the bias to zero.

    The draws come from a key of ``gtape.rng`` (counter-based: the same bits on every machine),
    in torch's (out, in) layout: the weight from ``key.split(2)[0]``, the bias from ``[1]``
    (``gtape.nn_init.uniform_init``). ``key`` is a ``gtape.rng.Key`` or an int seed of one;
    without ``key`` (and ``seed``) the layer takes the tape's next key (``Tape.next_key``), so
    two default layers never share weights. ``seed`` (an int or a numpy Generator; shared
    generators give independent layers) draws from numpy's default generator instead, the
    (in, out) draw transposed, as this layer did before keys.

    ``x`` may have any leading dims (torch's ``(..., in)``): they are flattened into rows for
    one serial matmul and restored after, so the weight gradient is one inner product over all
    leading positions in row-major order (``docs/semantics.md``).
    """

    def __init__(self, tp: Tape, in_features: int, out_features: int, bias: bool = True,
                 seed: Seed | None = None, init: str = "kaiming",
                 key: KeyLike | None = None) -> None:
        for name, n in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
                raise ValueError(f"Linear: {name} is {n!r}; expected an int >= 1")
        if init not in INITS:
            raise ValueError(f"Linear: init {init!r}; expected one of {sorted(INITS)}")
        self.in_features, self.out_features = int(in_features), int(out_features)
        n_in, n_out = self.in_features, self.out_features
        bbound = 1.0 / math.sqrt(n_in) if init == "kaiming" else 0.0
        if key is not None and seed is not None:
            raise TypeError("Linear: both key and seed were given; expected one of them (key: "
                            "gtape.rng draws; seed: numpy's generator) or neither (the tape's "
                            "next key)")
        if seed is None:  # the counter-based draws: the same bits on every machine
            kw, kb = layer_key("Linear", tp, key).split(2)
            wbound = (math.sqrt(6.0 / (n_in + n_out)) if init == "xavier"
                      else kaiming_bound(n_in))
            w = uniform_init(kw, (n_out, n_in), wbound)
            b = uniform_init(kb, (n_out,), bbound) if bias else None
        else:
            rng = _rng(seed)
            w = np.ascontiguousarray(INITS[init](n_in, n_out, rng).T)
            b = rng.uniform(-bbound, bbound, n_out) if bias else None
        # NOTE: weight before bias: attribute order is parameter order (torch's names)
        self.weight = tp.param(w)
        self.bias: Var | None = None if b is None else tp.param(b)

    @classmethod
    def from_weights(cls, tp: Tape, weight: Any, bias: Any = None) -> Linear:
        """A Linear holding copies of ``weight`` (out, in) and ``bias`` (out,) or None."""
        w = np.asarray(weight)
        if w.ndim != 2 or 0 in w.shape:
            raise ValueError(f"Linear.from_weights: weight has shape {w.shape}; expected "
                             "(out_features, in_features)")
        if bias is not None and np.shape(bias) != (w.shape[0],):
            raise ValueError(f"Linear.from_weights: bias has shape {np.shape(bias)}; expected "
                             f"({w.shape[0]},) for a weight of shape {w.shape}")
        for name, v in (("weight", w), ("bias", bias)):
            if v is not None and np.asarray(v).dtype.kind not in "biuf":
                raise TypeError(f"Linear.from_weights: {name} has dtype {np.asarray(v).dtype}; "
                                "expected real numbers")
        layer = cls.__new__(cls)
        layer.out_features, layer.in_features = (int(n) for n in w.shape)
        layer.weight = tp.param(w)
        layer.bias = None if bias is None else tp.param(bias)
        return layer

    @property
    def params(self) -> list[Var]:
        """[weight, bias] (or [weight])."""
        return [self.weight] + ([self.bias] if self.bias is not None else [])

    def forward(self, x: Any) -> Var:
        """x @ weight.T + bias (``g.linear``: one serial ``matmul`` reading the weight
        transposed in place, each output's inner product in ascending k, the same bits as
        x @ W for W = weight.T). ``x`` of shape (..., in): its leading dims fold into rows."""
        return linear(x, self.weight, self.bias)

    def __repr__(self) -> str:
        return f"Linear({self.in_features}, {self.out_features}, bias={self.bias is not None})"


ACTIVATIONS: dict[str, Callable[[Var], Var]] = {"relu": ops.relu, "tanh": ops.tanh,
                                                 "sigmoid": ops.sigmoid}


class MLP(Module):
    """Linear layers of ``sizes`` ([in, hidden..., out]) with ``activation`` between them
    (none after the last unless ``final`` names one); ``seed`` as ``Linear``'s (one generator
    for all layers), None: each layer takes the tape's next key."""

    def __init__(self, tp: Tape, sizes: Sequence[int], activation: str = "relu",
                 final: str | None = None, seed: Seed | None = None,
                 init: str = "kaiming") -> None:
        if len(sizes) < 2:
            raise ValueError(f"MLP: sizes {list(sizes)}; expected at least [in, out]")
        for name in (activation, final):
            if name is not None and name not in ACTIVATIONS:
                raise ValueError(f"MLP: activation {name!r}; expected one of "
                                 f"{sorted(ACTIVATIONS)}")
        rng = None if seed is None else _rng(seed)  # None: each layer the tape's next key
        self.layers = [Linear(tp, a, b, seed=rng, init=init) for a, b in zip(sizes, sizes[1:])]
        self.activation, self.final = activation, final

    @property
    def params(self) -> list[Var]:
        """Every layer's params, in order (W1, b1, W2, b2, ...)."""
        return [p for layer in self.layers for p in layer.params]

    def forward(self, x: Any) -> Var:
        """The layers in order, the activation between them (params named layers.k.weight)."""
        h = x
        for k, layer in enumerate(self.layers):
            h = layer(h)
            act = self.activation if k < len(self.layers) - 1 else self.final
            if act is not None:
                h = ACTIVATIONS[act](h)
        return h

    def __repr__(self) -> str:
        sizes = [self.layers[0].in_features] + [layer.out_features for layer in self.layers]
        return f"MLP({sizes}, activation={self.activation!r}, final={self.final!r})"


# layers defined on top of Linear (imported last: they use it)
from .activation_layers import GELU, SiLU, Softplus  # noqa: E402
from .batchnorm import BatchNorm1d, BatchNorm2d  # noqa: E402
from .nn_attention import MultiheadAttention  # noqa: E402
from .torch_interop import from_torch  # noqa: E402
from .vision_layers import AdaptiveAvgPool2d, ConvTranspose2d, Upsample  # noqa: E402
