"""Initial values drawn from ``gtape.rng`` (counter-based: the same bits on every machine).

A layer takes ``key``: a ``gtape.rng.Key`` or an int seed (``gtape.rng.key(seed)``); without
one it takes its tape's next key (``Tape.next_key``, the tape's seeded key stream, in
construction order). It splits the key once per tensor it draws (weight first, then bias), so
two layers given different keys (``key.split(n)``, ``key.fold(i)``, or two default keys) are
independent, and a layer's values do not depend on what was drawn before it.

* ``uniform_init(k, shape, b)``: ``-b + (b - -b) * u`` with ``u = gtape.rng.uniform(k, shape)``
  in float64 -- numpy's ``Generator.uniform(-b, b)`` formula, so it equals
  ``numpy.random.Generator(numpy.random.Philox(key=k.seed)).uniform(-b, b, shape)`` bit for bit;
* ``normal_init(k, shape, std)``: ``std * gtape.rng.normal(k, shape)`` (std 1: the draws).

>>> import numpy as np, gtape as g
>>> k = g.rng.key(3)
>>> w = g.nn.uniform_init(k, (2, 3), 0.5)
>>> bool(np.array_equal(w, np.random.Generator(np.random.Philox(key=3)).uniform(-0.5, 0.5, (2, 3))))
True
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gtensor import describe

from . import rng

KeyLike = rng.Key | int


def as_key(where: str, key: Any) -> rng.Key:
    """``key`` as a Key: a Key unchanged, an int seed through ``gtape.rng.key``."""
    if isinstance(key, rng.Key):
        return key
    if isinstance(key, bool) or not isinstance(key, (int, np.integer)):
        raise TypeError(f"{where}: key is {describe(key)}; expected a gtape.rng.Key (from "
                        "g.rng.key(seed), key.split(n) or key.fold(i)) or an int seed")
    return rng.key(int(key))


def layer_key(where: str, tp: Any, key: Any) -> rng.Key:
    """The key a layer made on tape ``tp`` draws from: ``key`` (a Key or an int seed) when
    given, else the tape's next key (``Tape.next_key``: construction order, never shared)."""
    if key is None:
        return tp.next_key()
    return as_key(where, key)


def kaiming_bound(fan_in: int, a: float = math.sqrt(5.0)) -> float:
    """torch's ``kaiming_uniform_(a)`` bound, in torch's order of operations:
    ``sqrt(3) * (sqrt(2 / (1 + a^2)) / sqrt(fan_in))`` (the default ``a = sqrt(5)``, torch's
    Linear and Conv2d weights: ``1 / sqrt(fan_in)`` up to rounding)."""
    gain = math.sqrt(2.0 / (1.0 + a * a))
    return math.sqrt(3.0) * (gain / math.sqrt(fan_in))


def uniform_init(key: rng.Key, shape: tuple[int, ...], bound: float) -> np.ndarray:
    """U(-bound, bound) of ``shape`` (float64) from ``key``: ``-b + (b - -b) * u``."""
    b = float(bound)
    return -b + (b - -b) * rng.uniform(key, shape)


def normal_init(key: rng.Key, shape: tuple[int, ...], std: float = 1.0) -> np.ndarray:
    """N(0, std^2) of ``shape`` (float64) from ``key``: ``std * gtape.rng.normal``."""
    return float(std) * rng.normal(key, shape)  # std 1: the draws themselves (x * 1 is exact)


# ---------------------------------------------------------------- torch.nn.init, in place
GAINS = {"linear": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv3d": 1.0, "sigmoid": 1.0,
         "tanh": 5.0 / 3, "relu": math.sqrt(2.0), "selu": 3.0 / 4}


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """torch's ``calculate_gain`` (linear, conv*, sigmoid 1; tanh 5/3; relu sqrt 2;
    leaky_relu sqrt(2 / (1 + slope^2)), slope ``param`` or 0.01; selu 3/4)."""
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity not in GAINS:
        raise ValueError(f"calculate_gain: nonlinearity {nonlinearity!r}; expected one of "
                         f"{sorted([*GAINS, 'leaky_relu'])}")
    return GAINS[nonlinearity]


def _param(where: str, p: Any) -> Any:
    from .var import Var

    if not isinstance(p, Var) or p.op != "param":
        raise TypeError(f"{where}: expected a param Var (tp.param(...), a layer's weight), got "
                        f"{describe(p)}")
    return p


def _fans(where: str, shape: tuple[int, ...]) -> tuple[int, int]:
    """torch's (fan_in, fan_out): size(1) and size(0) times the receptive field."""
    if len(shape) < 2:
        raise ValueError(f"{where}: fan in and fan out need at least 2 dims; the param has "
                         f"shape {shape}")
    receptive = int(np.prod(shape[2:], dtype=np.int64))
    return shape[1] * receptive, shape[0] * receptive


def _fill(p: Any, values: np.ndarray) -> Any:
    p.tape.set_value(p, values)
    return p


def _key(where: str, p: Any, key: Any) -> rng.Key:
    return layer_key(where, p.tape, key)


def uniform_(p: Any, a: float = 0.0, b: float = 1.0, key: KeyLike | None = None) -> Any:
    """p <- a + (b - a) * u, u = ``gtape.rng.uniform(key, p.shape)`` (key None: the tape's next
    key); returns p."""
    _param("uniform_", p)
    u = rng.uniform(_key("uniform_", p, key), p.shape)
    return _fill(p, float(a) + (float(b) - float(a)) * u)


def normal_(p: Any, mean: float = 0.0, std: float = 1.0, key: KeyLike | None = None) -> Any:
    """p <- std * z + mean, z = ``gtape.rng.normal(key, p.shape)``; returns p."""
    _param("normal_", p)
    z = rng.normal(_key("normal_", p, key), p.shape)
    return _fill(p, float(std) * z + float(mean))


def trunc_normal_(p: Any, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, key: KeyLike | None = None) -> Any:
    """p <- N(mean, std^2) draws kept in [a, b]: round r draws ``normal(key.fold(r))`` for the
    positions still outside (r = 0, 1, ...; at most 64 rounds); returns p."""
    _param("trunc_normal_", p)
    if not float(a) < float(b):
        raise ValueError(f"trunc_normal_: a {a} is not below b {b}")
    k = _key("trunc_normal_", p, key)
    out = np.full(p.shape, np.nan)
    todo = np.ones(p.shape, dtype=bool)
    for r in range(64):
        v = float(std) * rng.normal(k.fold(r), p.shape) + float(mean)
        take = todo & (v >= a) & (v <= b)
        out[take] = v[take]
        todo &= ~take
        if not todo.any():
            return _fill(p, out)
    raise ValueError(f"trunc_normal_: [a, b] = [{a}, {b}] holds too little of N({mean}, "
                     f"{std}^2): positions still unfilled after 64 rounds")


def constant_(p: Any, val: float) -> Any:
    """p <- val everywhere; returns p."""
    _param("constant_", p)
    return _fill(p, np.full(p.shape, float(val)))


def zeros_(p: Any) -> Any:
    """p <- 0; returns p."""
    return constant_(p, 0.0)


def ones_(p: Any) -> Any:
    """p <- 1; returns p."""
    return constant_(p, 1.0)


def xavier_bound(fan_in: int, fan_out: int, gain: float = 1.0) -> float:
    """torch's xavier_uniform_ bound: ``sqrt(3) * (gain * sqrt(2 / (fan_in + fan_out)))``."""
    return math.sqrt(3.0) * (gain * math.sqrt(2.0 / float(fan_in + fan_out)))


def xavier_uniform_(p: Any, gain: float = 1.0, key: KeyLike | None = None) -> Any:
    """p <- U(-b, b), b = ``xavier_bound`` of p's fans (torch's order); returns p."""
    _param("xavier_uniform_", p)
    bound = xavier_bound(*_fans("xavier_uniform_", p.shape), gain)
    return _fill(p, uniform_init(_key("xavier_uniform_", p, key), p.shape, bound))


def xavier_normal_(p: Any, gain: float = 1.0, key: KeyLike | None = None) -> Any:
    """p <- N(0, std^2), std = ``gain * sqrt(2 / (fan_in + fan_out))``; returns p."""
    _param("xavier_normal_", p)
    fi, fo = _fans("xavier_normal_", p.shape)
    std = gain * math.sqrt(2.0 / float(fi + fo))
    return _fill(p, normal_init(_key("xavier_normal_", p, key), p.shape, std))


def _kaiming_std(where: str, shape: tuple, a: float, mode: str, nonlinearity: str) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"{where}: mode is {mode!r}; expected 'fan_in' or 'fan_out'")
    fi, fo = _fans(where, shape)
    return calculate_gain(nonlinearity, a) / math.sqrt(fi if mode == "fan_in" else fo)


def kaiming_uniform_(p: Any, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", key: KeyLike | None = None) -> Any:
    """p <- U(-b, b), b = ``sqrt(3) * (gain / sqrt(fan))`` (torch's order); returns p."""
    _param("kaiming_uniform_", p)
    bound = math.sqrt(3.0) * _kaiming_std("kaiming_uniform_", p.shape, a, mode, nonlinearity)
    return _fill(p, uniform_init(_key("kaiming_uniform_", p, key), p.shape, bound))


def kaiming_normal_(p: Any, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", key: KeyLike | None = None) -> Any:
    """p <- N(0, std^2), std = ``gain / sqrt(fan)``; returns p."""
    _param("kaiming_normal_", p)
    std = _kaiming_std("kaiming_normal_", p.shape, a, mode, nonlinearity)
    return _fill(p, normal_init(_key("kaiming_normal_", p, key), p.shape, std))
