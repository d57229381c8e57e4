"""Initial values drawn from ``gtape.rng`` (counter-based: the same bits on every machine).

A layer takes ``key``: a ``gtape.rng.Key`` or an int seed (``gtape.rng.key(seed)``). It splits
the key once per tensor it draws (weight first, then bias), so two layers given different keys
(``key.split(n)``, or ``key.fold(i)``) are independent, and a layer's values do not depend on
what was drawn before it.

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
