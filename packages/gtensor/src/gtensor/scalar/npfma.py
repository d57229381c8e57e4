"""The scalar language's ``fma`` on numpy arrays: ``gtensor.fma.fma``'s one rounding, faster.

``gtensor.fma.fma`` is exact for every input but pays for that generality (frexp scaling,
exact integer fallbacks): ~0.4 s per million float64 elements. The scalar functions call fma
many times per element on operands of ordinary size, so this module runs the unscaled
Boldo-Melquiond step (Dekker's exact product, a two-sum, round to odd, one last rounding;
see ``gtensor.fma``) on every element and hands only the elements outside its safe range to
``gtensor.fma.fma``. The safe range: ``a`` and ``b`` nonzero with magnitudes in
[2^-450, 2^450] and ``|c| < 2^960`` (any ``c``, zero and subnormals included): then every
partial product is at least 2^-1006 in magnitude, nothing overflows, and a nonzero result is
at least 2^-900 - so the step is exact up to its one rounding, and a zero result (``c`` exactly
``-a*b``) is +0.0 as IEEE's fma gives it. Both give the same bits, so which elements take which
route never shows. A zero factor (finite operands) is also done here: ``a*b`` is then an exact
signed zero and ``a*b + c`` one IEEE addition, as fma's.
"""

from __future__ import annotations

import numpy as np

from .. import fma as exact

_SPLIT = 134217729.0  # 2^27 + 1
_LO, _HI, _C_HI = 2.0 ** -450, 2.0 ** 450, 2.0 ** 960


def fma(a, b, c) -> np.ndarray:
    """``RN(a*b + c)`` elementwise (broadcasting), float64 or float32, bitwise IEEE's fma."""
    a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
    dt = np.result_type(a, b, c)
    if dt == np.float32:
        return exact.fma(a.astype(dt), b.astype(dt), c.astype(dt))
    a, b, c = np.broadcast_arrays(a.astype(np.float64), b.astype(np.float64),
                                  c.astype(np.float64))
    with np.errstate(all="ignore"):
        out = _unscaled(a, b, c)
        ma, mb = np.abs(a), np.abs(b)
        unsafe = ~((ma >= _LO) & (ma <= _HI) & (mb >= _LO) & (mb <= _HI) & (np.abs(c) < _C_HI))
        # a zero factor with finite operands: a*b is an exact signed zero, so a*b + c is exact
        zero = ((ma == 0) | (mb == 0)) & np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
        if zero.any():
            out = np.where(zero, a * b + c, out)
            unsafe &= ~zero
        if unsafe.any():
            out = np.array(out, copy=True)
            out[unsafe] = exact.fma(a[unsafe], b[unsafe], c[unsafe])
    return out


def _unscaled(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    t = _SPLIT * a
    ah = t - (t - a)
    al = a - ah
    t = _SPLIT * b
    bh = t - (t - b)
    bl = b - bh
    uh = a * b
    ul = ((ah * bh - uh) + ah * bl + al * bh) + al * bl  # uh + ul == a*b exactly
    th = c + uh  # two-sum: th + tl == c + uh
    bb = th - c
    tl = (c - (th - bb)) + (uh - bb)
    s = tl + ul  # two-sum: s + e == tl + ul
    bb = s - tl
    e = (tl - (s - bb)) + (ul - bb)
    # round s + e to odd: an inexact sum whose last bit is even moves one ulp toward e
    bits = s.view(np.int64)
    fix = ((bits & 1) == 0) & (e != 0)
    step = np.where((e > 0) == (s > 0), 1, -1)
    v = np.where(fix, (bits + step).view(np.float64), s)
    return th + v
