"""The correctly rounded value of a function, from mpmath, without double rounding.

``correctly_rounded(name, x, fmt)`` evaluates the exact function at increasing precision
(Ziv's strategy on the reference side: 128, 256, ..., 4096 bits) until the value, widened by
its error bound (mpmath's functions are accurate to a few units of their working precision;
we allow 2^(8-p) relative), rounds to the same number of the target format at both ends; the
rounding is exact integer arithmetic onto the format's grid (53 or 24 bits, subnormals on
their fixed grid, ties to even, overflow to infinity), straight from the multiprecision value:
never through a float64 first, so a float32 reference has no double rounding.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np

# format -> (precision, exponent of the subnormal spacing, exponent of the overflow threshold)
FORMATS = {np.float64: (53, -1074, 1024), np.float32: (24, -149, 128)}


def _sigmoid(x):
    return 1 / (1 + mp.exp(-x))


FUNCTIONS = {
    "erf": mp.erf, "log1p": mp.log1p, "expm1": mp.expm1, "sin": mp.sin, "cos": mp.cos,
    "exp": mp.exp, "log": mp.log, "tanh": mp.tanh, "sigmoid": _sigmoid,
}


def round_to_format(v: mp.mpf, fmt) -> float:
    """RN(v) in ``fmt`` (np.float64 / np.float32) by exact integer arithmetic, as a float."""
    p, emin, emax = FORMATS[fmt]
    if v == 0:
        return 0.0
    sign = -1.0 if v < 0 else 1.0
    man, exp = mp.mpf(abs(v)).man_exp  # |v| = man * 2^exp, man odd
    bits = int(man).bit_length()
    top = exp + bits  # 2^(top-1) <= |v| < 2^top
    if top > emax:  # at least 2^emax: overflow
        return sign * math.inf
    if top <= emin - 1:  # below half the smallest subnormal: rounds to zero
        return sign * 0.0
    q = max(top - p, emin)  # the spacing exponent of the grid at |v|
    shift = exp - q
    if shift >= 0:
        n = int(man) << shift
    else:
        n, rem = divmod(int(man), 1 << -shift)
        half = 1 << (-shift - 1)
        if rem > half or (rem == half and n & 1):
            n += 1
    if n == 0:
        return sign * 0.0
    if n.bit_length() + q > emax:  # rounds to at least 2^emax: overflow
        return sign * math.inf
    return sign * math.ldexp(float(n), q)  # n < 2^(p+1): exact


def correctly_rounded(name: str, x: float, fmt=np.float64) -> float:
    """The correctly rounded ``name(x)`` in ``fmt`` for a finite ``x`` (NaN outside the
    function's domain), as a Python float."""
    f = FUNCTIONS[name]
    xf = float(x)  # keeps the sign of a zero (an mpf has none)
    x = mp.mpf(xf)
    for prec in (128, 256, 512, 1024, 2048, 4096):
        with mp.workprec(prec):
            try:
                v = f(x)
            except (ValueError, ZeroDivisionError):
                return math.nan
            if isinstance(v, mp.mpc):
                return math.nan
            if v == 0:  # f(+-0) = +-0 for the odd functions (and log1p, expm1), else +0
                return xf if xf == 0 else 0.0
            if not mp.isfinite(v):
                return float(v)
        with mp.workprec(prec + 16):
            err = abs(v) * mp.ldexp(1, 8 - prec)
            lo, hi = round_to_format(v - err, fmt), round_to_format(v + err, fmt)
        if lo == hi:
            return lo
    raise ArithmeticError(f"{name}({float(x)!r}): not decided at 4096 bits")


def reference(name: str, xs: np.ndarray) -> np.ndarray:
    """``correctly_rounded`` over an array (its dtype is the format); NaN and infinite inputs
    follow IEEE / C99 and are left to the caller (returned as NaN here)."""
    fmt = np.float64 if xs.dtype == np.float64 else np.float32
    out = np.full(xs.shape, np.nan, xs.dtype)
    for i, x in np.ndenumerate(xs):
        if np.isfinite(x):
            out[i] = correctly_rounded(name, float(x), fmt)
    return out
