"""Exact fused multiply-add on numpy arrays: ``fma(a, b, c) = RN(a*b + c)``, one rounding.

numpy has no fma, so the reference computes it from correctly rounded operations only
(Boldo & Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using
rounding to odd", IEEE TC 57(4), 2008):

* float32: ``a*b`` is exact in float64 (24 + 24 <= 53 bits, no under/overflow), ``s = a*b + c``
  is rounded *to odd* in float64 (a two-sum gives the error; an inexact sum whose last bit is
  even moves one ulp toward the error), then rounded to nearest float32. Rounding to odd at
  53 >= 24 + 2 bits then to nearest is the single rounding (subnormal and overflowing float32
  results included, since the float32 grid is coarser still).
* float64: ``a = ma 2^ea``, ``b = mb 2^eb`` exactly (frexp), ``c' = c 2^-(ea+eb)`` (exact, or
  clamped where ``c`` cannot affect the result but as a sign); ``uh + ul = ma*mb`` exactly
  (Dekker's split product), ``th + tl = c' + uh`` exactly (two-sum), ``v = RO(tl + ul)``,
  ``z' = RN(th + v)`` (the paper's correctly rounded sum of three), and ``z = z' 2^(ea+eb)``,
  exact unless it overflows (then inf, as IEEE rounds). The scaling keeps every intermediate
  in the normal range. A result in the subnormal range would be rounded twice by the last
  scaling; those elements (rare) are computed from the exact rational value with integers.

Special values follow IEEE 754: NaN in, NaN out; inf * 0 and inf - inf are NaN; an exact zero
result is +0.0 unless ``a*b`` and ``c`` are both -0.0; a result that rounds to zero keeps the
sign of ``a*b + c``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

_SPLIT = 134217729.0  # 2^27 + 1: Dekker's splitter for 53-bit significands
_TINY_C = 2.0 ** -300  # stands for a c too small to matter but as a sign (see _fma64)


def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a*b + c`` with one rounding to nearest (even), elementwise with broadcasting.

    All three must share one dtype, float64 or float32.

    >>> import numpy as np
    >>> x = np.float64(1 + 2.0 ** -30)
    >>> float(fma(x, x, np.float64(-1.0))) == 2.0 ** -29 + 2.0 ** -60
    True
    """
    a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
    if not (a.dtype == b.dtype == c.dtype) or a.dtype not in (np.float64, np.float32):
        raise TypeError(f"fma: a, b and c must share one dtype, float64 or float32; got "
                        f"{a.dtype}, {b.dtype} and {c.dtype}")
    with np.errstate(all="ignore"):
        if a.dtype == np.float32:
            return _fma32(a, b, c)
        return _fma64(*np.broadcast_arrays(a, b, c))


def _two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s + e == x + y exactly, s = RN(x + y) (Knuth's branch-free two-sum)."""
    s = x + y
    bb = s - x
    e = (x - (s - bb)) + (y - bb)
    return s, e


def _odd(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Round to odd the exact value s + e, where s = RN(s + e) and e is its error."""
    bits = s.view(np.uint64 if s.dtype == np.float64 else np.uint32)
    even = (bits & 1) == 0
    fix = even & (e != 0)
    if not fix.any():
        return s
    toward = np.where(e > 0, np.inf, -np.inf).astype(s.dtype)
    return np.where(fix, np.nextafter(s, toward), s)


def _fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    a64, b64, c64 = a.astype(np.float64), b.astype(np.float64), c.astype(np.float64)
    p = a64 * b64  # exact
    s, e = _two_sum(p, c64)  # exact (no overflow: |p| <= 2^256, |c| < 2^128)
    # non-finite inputs: the plain f64 expression gives the IEEE class (e is NaN there)
    fin = np.isfinite(s)
    s = np.where(fin, _odd(s, np.where(fin, e, 0.0)), s)
    return s.astype(np.float32)


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x == hi + lo exactly, each with at most 26 significant bits (Dekker)."""
    t = _SPLIT * x
    hi = t - (t - x)
    return hi, x - hi


def _fma64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    plain = a * b + c  # right wherever a or b is zero or non-finite (the IEEE classes)
    finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    main = finite & (a != 0) & (b != 0) & (c != 0)
    # c = +-0 with a*b != 0: the result is RN(a*b), one multiply; c = +-inf with finite a, b: c
    out = np.where(finite & (c == 0) & (a != 0) & (b != 0), a * b, plain)
    out = np.where(np.isinf(c) & np.isfinite(a) & np.isfinite(b), c, out)
    if not main.any():
        return out
    ma, ea = np.frexp(np.where(main, a, 1.0))
    mb, eb = np.frexp(np.where(main, b, 1.0))
    cm = np.where(main, c, 1.0)
    e = ea.astype(np.int64) + eb
    ec = np.frexp(cm)[1].astype(np.int64)
    d = ec - e  # |a*b| in [2^(e-2), 2^e), |c| in [2^(ec-1), 2^ec)
    # d > 110: |a*b| < 2^(ec-111) is under a quarter of c's spacing, so the result is c.
    # d < -200: |c'| < 2^-200 lies below the 2^-106 grid of ma*mb; only its sign matters.
    big, small = d > 110, d < -200
    cs = np.where(small, np.copysign(_TINY_C, cm),
                  np.ldexp(cm, np.clip(-e, -2200, 2200).astype(np.int32)))
    cs = np.where(big, 0.0, cs)
    ah, al = _split(ma)
    bh, bl = _split(mb)
    uh = ma * mb
    ul = ((ah * bh - uh) + ah * bl + al * bh) + al * bl  # uh + ul == ma * mb exactly
    th, tl = _two_sum(cs, uh)
    v = _odd(*_two_sum(tl, ul))
    zs = th + v  # RN(c' + ma*mb)
    z = np.ldexp(zs, e.astype(np.int32))
    mag = np.abs(zs)
    # results at or under 2^-1021: the exact integer path (the last ldexp would round twice)
    sub = main & ~big & (zs != 0) & (np.frexp(mag)[1].astype(np.int64) + e <= -1021)
    z = np.where(big, cm, z)
    out = np.where(main, z, out)
    if sub.any():
        idx = np.nonzero(sub)
        out = out.copy() if not out.flags.writeable else out
        out[idx] = [_fma64_exact(float(x), float(y), float(w))
                    for x, y, w in zip(a[idx], b[idx], c[idx])]
    return out


def _fma64_exact(a: float, b: float, c: float) -> float:
    """RN(a*b + c) for finite nonzero a, b, c whose result is under 2^-1021 in magnitude."""
    x = Fraction(a) * Fraction(b) + Fraction(c)
    if x == 0:
        return 0.0
    n = round(x * 2 ** 1074)  # half to even, on the subnormal grid
    r = float(Fraction(n, 2 ** 1074))  # n < 2^54: exact
    return r if r != 0 else (-0.0 if x < 0 else 0.0)


# Operands whose nonzero magnitudes lie in [2^-450, 2^450] (and accumulators under 2^960) need
# no scaling: every product is at least 2^-900 and its low part at least 2^-1006, so no
# intermediate underflows (and every result, a multiple of 2^-1006, is normal or zero), and
# neither the split nor any sum overflows.
_SAFE_LO, _SAFE_HI, _ACC_HI = 2.0 ** -450, 2.0 ** 450, 2.0 ** 960


def fma_chain(cols: np.ndarray, rows: np.ndarray, shape: tuple) -> np.ndarray:
    """``acc = +0.0``, then ``acc = fma(cols[k], rows[k], acc)`` for k ascending (matmul's fma
    contract; ``cols[k]`` and ``rows[k]`` broadcast to ``shape``).

    float64 operands in the safe range run an unscaled two-product / two-sum / round-to-odd
    step (the operands' splits computed once for every k); anything else, and any step whose
    accumulator left the range, runs ``fma``.
    """
    acc = np.zeros(shape, cols.dtype)
    if cols.dtype != np.float64 or not (_safe(cols) and _safe(rows)):
        for kk in range(cols.shape[0]):
            acc = fma(cols[kk], rows[kk], acc)
        return acc
    with np.errstate(all="ignore"):
        ch, cl = _split(cols)
        rh, rl = _split(rows)
        uh, ul, t, th, tl, bb = (np.empty(shape) for _ in range(6))
        for kk in range(cols.shape[0]):
            if kk and not np.abs(acc).max(initial=0.0) < _ACC_HI:  # NaN fails too
                acc = fma(cols[kk], rows[kk], acc)
                continue
            a, b, ah, al, bh, bl = cols[kk], rows[kk], ch[kk], cl[kk], rh[kk], rl[kk]
            np.multiply(a, b, out=uh)
            np.multiply(ah, bh, out=ul)
            ul -= uh
            ul += np.multiply(ah, bl, out=t)
            ul += np.multiply(al, bh, out=t)
            ul += np.multiply(al, bl, out=t)  # uh + ul == a * b exactly
            np.add(acc, uh, out=th)  # two-sum: th + tl == acc + uh
            np.subtract(th, acc, out=bb)
            np.subtract(th, bb, out=tl)
            np.subtract(acc, tl, out=tl)
            np.subtract(uh, bb, out=t)
            tl += t
            s, e = _two_sum(tl, ul)  # s + e == tl + ul exactly
            # RN(th + v). NOTE: no zero-sign fix-up is needed: acc starts at +0.0 and no result
            # rounds to zero in this range, so acc (hence th) is never -0.0, and th + (+-0) is th
            acc = th + _odd(s, e)
    return acc


def _safe(x: np.ndarray) -> bool:
    """Every element zero or of magnitude in [_SAFE_LO, _SAFE_HI] (NaN and inf are not)."""
    m = np.abs(x)
    return bool(np.all((m == 0) | ((m >= _SAFE_LO) & (m <= _SAFE_HI))))
