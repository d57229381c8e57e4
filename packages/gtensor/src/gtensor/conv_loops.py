"""Slow Python loops spelling out conv2d's and the pools' definitions: the test oracles.

Each loop follows docs/semantics.md word for word on numpy scalars (``np.float64`` /
``np.float32``: one IEEE rounding per operation), independent of the vectorized references
in ``gtensor.ops.conv`` / ``gtensor.ops.pool`` (no im2col, no masks). Meant for tiny shapes.
Under ``inner="fma"`` each chain starts at +0.0 and takes one fused multiply-add per term,
computed here by ``exact_fma`` from the exact rational value (fractions, rounded by integer
arithmetic), independent of the vectorized ``gtensor.fma``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

# significand bits, minimum normal exponent, maximum exponent
_FORMATS = {np.float64: (53, -1022, 1023), np.float32: (24, -126, 127)}


def _round(x: Fraction, T) -> float:
    """x != 0 rounded to nearest-even in format T (subnormals included; overflow: inf)."""
    p, emin, emax = _FORMATS[T]
    n, d = abs(x.numerator), x.denominator
    e = n.bit_length() - d.bit_length()  # 2^e <= |x| < 2^(e+2) after the fix below
    if (n < d << e) if e >= 0 else (n << -e < d):
        e -= 1
    q = max(e, emin) - (p - 1)  # exponent of the last significand bit
    r = round(Fraction(n, d << q) if q >= 0 else Fraction(n << -q, d))  # half to even
    if r and (r * 2 ** q if q >= 0 else Fraction(r, 2 ** -q)) >= 2 ** (emax + 1):
        return math.inf if x > 0 else -math.inf
    v = math.ldexp(r, q)  # exact: r <= 2^p
    return v if x > 0 else -v


def exact_fma(a, b, c):
    """IEEE 754 fma(a, b, c) = a*b + c rounded once, for numpy scalars of one float type."""
    T = type(c)
    fa, fb, fc = float(a), float(b), float(c)
    if not (math.isfinite(fa) and math.isfinite(fb)):
        with np.errstate(all="ignore"):  # a*b is inf or NaN exactly: IEEE's class
            return T(T(a) * T(b) + c)
    if not math.isfinite(fc):
        return c
    x = Fraction(fa) * Fraction(fb) + Fraction(fc)
    if x == 0:  # -0.0 only when a*b and c are both zeros of sign -
        neg = (fa == 0 or fb == 0) and fc == 0 and math.copysign(1, fc) < 0 \
            and math.copysign(1, fa) * math.copysign(1, fb) < 0
        return T(-0.0 if neg else 0.0)
    return T(_round(x, T))


def _chain(T, inner: str):
    """The chain step of contract ``inner``: (acc, a, b) -> the next acc (acc None: first)."""
    if inner == "fma":
        return lambda acc, a, b: exact_fma(a, b, T(0.0) if acc is None else acc)
    if inner != "plain":
        raise ValueError(f"conv loops: inner is {inner!r}; expected 'plain' or 'fma'")
    return lambda acc, a, b: a * b if acc is None else acc + a * b


def _pair(v) -> tuple[int, int]:
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _T(a: np.ndarray):
    return np.float64 if a.dtype == np.float64 else np.float32


def _out(size: int, k: int, s: int, p: int) -> int:
    return (size + 2 * p - k) // s + 1


def _xp(x: np.ndarray, n: int, c: int, yy: int, xx: int):
    """x[n, c, yy, xx], or +0.0 outside (the padding)."""
    if 0 <= yy < x.shape[2] and 0 <= xx < x.shape[3]:
        return _T(x)(x[n, c, yy, xx])
    return _T(x)(0.0)


def loop_conv2d(x: np.ndarray, w: np.ndarray, stride=1, padding=0,
                inner="plain") -> np.ndarray:
    """y[n, o, oy, ox]: serial over (c, i, j) row-major of w * x_padded, the first starts
    (fma: from +0.0, one fma per term)."""
    (sh, sw), (ph, pw) = _pair(stride), _pair(padding)
    n_, c_, h, wd = x.shape
    o_, _, kh, kw = w.shape
    oh, ow = _out(h, kh, sh, ph), _out(wd, kw, sw, pw)
    y = np.zeros((n_, o_, oh, ow), x.dtype)
    T = _T(x)
    step = _chain(T, inner)
    with np.errstate(all="ignore"):
        for n in range(n_):
            for o in range(o_):
                for oy in range(oh):
                    for ox in range(ow):
                        acc = None
                        for c in range(c_):
                            for i in range(kh):
                                for j in range(kw):
                                    acc = step(acc, T(w[o, c, i, j]),
                                               _xp(x, n, c, oy * sh + i - ph, ox * sw + j - pw))
                        y[n, o, oy, ox] = acc
    return y


def loop_conv2d_grad_weight(g: np.ndarray, x: np.ndarray, stride=1, padding=0,
                            kernel=(3, 3), inner="plain") -> np.ndarray:
    """dw[o, c, i, j]: serial over (n, oy, ox) row-major of g * x_padded (none: +0.0; fma:
    from +0.0, one fma per term)."""
    (sh, sw), (ph, pw), (kh, kw) = _pair(stride), _pair(padding), _pair(kernel)
    n_, o_, oh, ow = g.shape
    c_ = x.shape[1]
    dw = np.zeros((o_, c_, kh, kw), g.dtype)
    T = _T(g)
    step = _chain(T, inner)
    with np.errstate(all="ignore"):
        for o in range(o_):
            for c in range(c_):
                for i in range(kh):
                    for j in range(kw):
                        acc = None
                        for n in range(n_):
                            for oy in range(oh):
                                for ox in range(ow):
                                    acc = step(acc, T(g[n, o, oy, ox]),
                                               _xp(x, n, c, oy * sh + i - ph, ox * sw + j - pw))
                        dw[o, c, i, j] = T(0.0) if acc is None else acc
    return dw


def loop_conv2d_grad_input(g: np.ndarray, w: np.ndarray, stride=1, padding=0,
                           size=(3, 3), inner="plain") -> np.ndarray:
    """dx[n, c, y, x]: serial over the taps (i, j) row-major reaching it of the tap's serial
    chain over o of w * g (fma: from +0.0, one fma per term); the first tap starts, the taps'
    sum is plain adds under both contracts; none: +0.0."""
    (sh, sw), (ph, pw), (h, wd) = _pair(stride), _pair(padding), _pair(size)
    n_, o_, oh, ow = g.shape
    _, c_, kh, kw = w.shape
    dx = np.zeros((n_, c_, h, wd), g.dtype)
    T = _T(g)
    step = _chain(T, inner)
    with np.errstate(all="ignore"):
        for n in range(n_):
            for c in range(c_):
                for yy in range(h):
                    for xx in range(wd):
                        acc = None
                        for i in range(kh):
                            for j in range(kw):
                                ty, tx = yy + ph - i, xx + pw - j
                                if ty < 0 or tx < 0 or ty % sh or tx % sw:
                                    continue
                                oy, ox = ty // sh, tx // sw
                                if oy >= oh or ox >= ow:
                                    continue
                                t = None
                                for o in range(o_):
                                    t = step(t, T(w[o, c, i, j]), T(g[n, o, oy, ox]))
                                acc = t if acc is None else acc + t
                        dx[n, c, yy, xx] = T(0.0) if acc is None else acc
    return dx


def _pool_geom(x_shape: tuple, kernel, stride):
    kh, kw = _pair(kernel)
    sh, sw = (kh, kw) if stride is None else _pair(stride)
    return kh, kw, sh, sw, (x_shape[2] - kh) // sh + 1, (x_shape[3] - kw) // sw + 1


def loop_window_choice(x: np.ndarray, n: int, c: int, oy: int, ox: int, kernel, stride):
    """(y, x) of the element max-pool window (oy, ox) chooses: a serial scan in tap order, a
    later element only when strictly greater, the first NaN ends the scan."""
    kh, kw, sh, sw, _, _ = _pool_geom(x.shape, kernel, stride)
    best = (oy * sh, ox * sw)
    bv = x[n, c, best[0], best[1]]
    if bv != bv:
        return best
    for i in range(kh):
        for j in range(kw):
            v = x[n, c, oy * sh + i, ox * sw + j]
            if v != v:
                return (oy * sh + i, ox * sw + j)
            if v > bv:
                best, bv = (oy * sh + i, ox * sw + j), v
    return best


def loop_max_pool2d(x: np.ndarray, kernel, stride=None) -> np.ndarray:
    """The chosen element of each window."""
    return loop_max_pool2d_pick(x, x, kernel, stride)


def loop_max_pool2d_pick(v: np.ndarray, x: np.ndarray, kernel, stride=None) -> np.ndarray:
    """v at the element each window of x chooses."""
    _, _, _, _, oh, ow = _pool_geom(x.shape, kernel, stride)
    y = np.zeros(x.shape[:2] + (oh, ow), v.dtype)
    for n, c, oy, ox in np.ndindex(y.shape):
        yy, xx = loop_window_choice(x, n, c, oy, ox, kernel, stride)
        y[n, c, oy, ox] = v[n, c, yy, xx]
    return y


def _windows_of(yy: int, xx: int, kernel, stride, x_shape):
    """The windows (oy, ox) containing (yy, xx), in row-major order."""
    kh, kw, sh, sw, oh, ow = _pool_geom(x_shape, kernel, stride)
    return [(oy, ox) for oy in range(oh) for ox in range(ow)
            if oy * sh <= yy < oy * sh + kh and ox * sw <= xx < ox * sw + kw]


def loop_max_pool2d_grad(g: np.ndarray, x: np.ndarray, kernel, stride=None) -> np.ndarray:
    """dx: per element the serial sum over the windows (row-major) choosing it of g."""
    dx = np.zeros(x.shape, g.dtype)
    T = _T(g)
    with np.errstate(all="ignore"):
        for n, c, yy, xx in np.ndindex(x.shape):
            acc = None
            for oy, ox in _windows_of(yy, xx, kernel, stride, x.shape):
                if loop_window_choice(x, n, c, oy, ox, kernel, stride) == (yy, xx):
                    t = T(g[n, c, oy, ox])
                    acc = t if acc is None else acc + t
            dx[n, c, yy, xx] = T(0.0) if acc is None else acc
    return dx


def loop_avg_pool2d(x: np.ndarray, kernel, stride=None) -> np.ndarray:
    """Per window: the serial sum in tap order, then / (kh*kw)."""
    kh, kw, sh, sw, oh, ow = _pool_geom(x.shape, kernel, stride)
    T = _T(x)
    y = np.zeros(x.shape[:2] + (oh, ow), x.dtype)
    with np.errstate(all="ignore"):
        for n, c, oy, ox in np.ndindex(y.shape):
            acc = None
            for i in range(kh):
                for j in range(kw):
                    v = T(x[n, c, oy * sh + i, ox * sw + j])
                    acc = v if acc is None else acc + v
            y[n, c, oy, ox] = acc / T(kh * kw)
    return y


def loop_avg_pool2d_grad(g: np.ndarray, kernel, stride=None, size=(2, 2)) -> np.ndarray:
    """dx: per element the serial sum over the windows (row-major) containing it of
    g / (kh*kw); none: +0.0."""
    kh, kw = _pair(kernel)
    shape = g.shape[:2] + tuple(_pair(size))
    T = _T(g)
    dx = np.zeros(shape, g.dtype)
    with np.errstate(all="ignore"):
        for n, c, yy, xx in np.ndindex(shape):
            acc = None
            for oy, ox in _windows_of(yy, xx, kernel, stride, shape):
                t = T(g[n, c, oy, ox]) / T(kh * kw)
                acc = t if acc is None else acc + t
            dx[n, c, yy, xx] = T(0.0) if acc is None else acc
    return dx
