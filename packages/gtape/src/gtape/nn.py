"""Layers in the spirit of ``torch.nn.Linear`` and micrograd's ``nn.py``: parameters
registered on a tape, seeded initialisers as torch defines them.

Convention: ``y = x @ W + b`` with ``W`` of shape (in, out) and ``b`` of shape (1, out) (the
transpose of torch's (out, in) storage; the same distribution).

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> mlp = g.nn.MLP(tp, [3, 8, 1], seed=0)
>>> y = mlp(tp.const(np.ones((5, 3))))
>>> y.shape, len(mlp.params)
((5, 1), 4)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import ops
from .tape import Tape
from .var import Var

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


class Linear:
    """``y = x @ W + b``: W (in, out) and b (1, out) registered as params of ``tp``.

    Initialisation as ``torch.nn.Linear``: W by ``kaiming_uniform`` (a = sqrt 5), b uniform in
    ``(-1/sqrt(in), 1/sqrt(in))``; ``init="xavier"`` draws W by ``xavier_uniform`` and sets
    b to zero. ``seed`` is an int or a numpy Generator (shared generators give independent
    layers).
    """

    def __init__(self, tp: Tape, in_features: int, out_features: int, bias: bool = True,
                 seed: Seed = 0, init: str = "kaiming") -> None:
        for name, n in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
                raise ValueError(f"Linear: {name} is {n!r}; expected an int >= 1")
        if init not in INITS:
            raise ValueError(f"Linear: init {init!r}; expected one of {sorted(INITS)}")
        rng = _rng(seed)
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight = tp.param(INITS[init](self.in_features, self.out_features, rng))
        self.bias: Var | None = None
        if bias:
            bound = 1.0 / math.sqrt(self.in_features) if init == "kaiming" else 0.0
            self.bias = tp.param(rng.uniform(-bound, bound, (1, self.out_features)))

    @property
    def params(self) -> list[Var]:
        """[weight, bias] (or [weight])."""
        return [self.weight] + ([self.bias] if self.bias is not None else [])

    def __call__(self, x: Any) -> Var:
        """x @ W + b."""
        y = ops.matmul(x, self.weight)
        return y if self.bias is None else ops.add(y, self.bias)

    def __repr__(self) -> str:
        return f"Linear({self.in_features}, {self.out_features}, bias={self.bias is not None})"


ACTIVATIONS: dict[str, Callable[[Var], Var]] = {"relu": ops.relu, "tanh": ops.tanh,
                                                 "sigmoid": ops.sigmoid}


class MLP:
    """Linear layers of ``sizes`` ([in, hidden..., out]) with ``activation`` between them
    (none after the last unless ``final`` names one)."""

    def __init__(self, tp: Tape, sizes: Sequence[int], activation: str = "relu",
                 final: str | None = None, seed: Seed = 0, init: str = "kaiming") -> None:
        if len(sizes) < 2:
            raise ValueError(f"MLP: sizes {list(sizes)}; expected at least [in, out]")
        for name in (activation, final):
            if name is not None and name not in ACTIVATIONS:
                raise ValueError(f"MLP: activation {name!r}; expected one of "
                                 f"{sorted(ACTIVATIONS)}")
        rng = _rng(seed)
        self.layers = [Linear(tp, a, b, seed=rng, init=init) for a, b in zip(sizes, sizes[1:])]
        self.activation, self.final = activation, final

    @property
    def params(self) -> list[Var]:
        """Every layer's params, in order (W1, b1, W2, b2, ...)."""
        return [p for layer in self.layers for p in layer.params]

    def __call__(self, x: Any) -> Var:
        """The layers in order, the activation between them."""
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
