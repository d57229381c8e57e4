"""An exact fma oracle: Python fractions rounded to nearest-even by integer arithmetic (never
through a float operation), with IEEE 754's special-value and zero-sign rules spelled out."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

# (significand bits, minimum exponent of a normal, maximum exponent, bit type)
FORMATS = {np.float64: (53, -1022, 1023, np.uint64), np.float32: (24, -126, 127, np.uint32)}


def _round(x: Fraction, dt) -> float:
    """x rounded to nearest-even in format dt (subnormals, overflow to inf); x != 0."""
    p, emin, emax, _ = FORMATS[dt]
    mag = abs(x)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()  # 2^e <= mag < 2^(e+2)
    while Fraction(2) ** e > mag:
        e -= 1
    while Fraction(2) ** (e + 1) <= mag:
        e += 1
    q = max(e, emin) - (p - 1)  # exponent of the last significand bit
    n = round(mag / Fraction(2) ** q)  # half to even
    if n >= 2 ** p:
        n //= 2
        q += 1  # (n was exactly 2^p, even: no second rounding)
    if n and q + p - 1 > emax:
        return math.inf if x > 0 else -math.inf
    r = math.ldexp(n, q) if n else 0.0  # exact: n < 2^p
    return r if x > 0 else -r


def oracle(a: float, b: float, c: float, dt) -> float:
    """IEEE 754 fma(a, b, c) in format dt, from the exact rational value."""
    if math.isnan(a) or math.isnan(b) or math.isnan(c):
        return math.nan
    if math.isinf(a) or math.isinf(b):
        if a == 0 or b == 0:
            return math.nan
        s = math.copysign(1.0, a) * math.copysign(1.0, b)
        if math.isinf(c) and math.copysign(1.0, c) != s:
            return math.nan
        return s * math.inf
    if math.isinf(c):
        return c
    x = Fraction(a) * Fraction(b) + Fraction(c)
    if x == 0:
        neg_ab = (math.copysign(1.0, a) * math.copysign(1.0, b) < 0) and (a * 0 == 0)
        both_neg_zero = (a == 0 or b == 0) and neg_ab and c == 0 and math.copysign(1.0, c) < 0
        return -0.0 if both_neg_zero else 0.0
    return _round(x, dt)
