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


def _conv_out(size: int, k: int, s: int, p: int, d: int = 1) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def loop_conv2d(x: np.ndarray, w: np.ndarray, stride=1, padding=0, inner="plain",
                dilation=1, groups=1) -> np.ndarray:
    """y[n, o, oy, ox]: serial over the group's (c, i, j) row-major of w * x_padded at
    (oy*sh + i*dh, ox*sw + j*dw), the first starts (fma: from +0.0, one fma per term)."""
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    n_, c_, h, wd = x.shape
    o_, cg, kh, kw = w.shape
    og = o_ // groups
    oh, ow = _conv_out(h, kh, sh, ph, dh), _conv_out(wd, kw, sw, pw, dw)
    y = np.zeros((n_, o_, oh, ow), x.dtype)
    T = _T(x)
    step = _chain(T, inner)
    with np.errstate(all="ignore"):
        for n in range(n_):
            for o in range(o_):
                c0 = (o // og) * cg
                for oy in range(oh):
                    for ox in range(ow):
                        acc = None
                        for c in range(cg):
                            for i in range(kh):
                                for j in range(kw):
                                    acc = step(acc, T(w[o, c, i, j]),
                                               _xp(x, n, c0 + c, oy * sh + i * dh - ph,
                                                   ox * sw + j * dw - pw))
                        y[n, o, oy, ox] = acc
    return y


def loop_conv2d_grad_weight(g: np.ndarray, x: np.ndarray, stride=1, padding=0,
                            kernel=(3, 3), inner="plain", dilation=1,
                            groups=1) -> np.ndarray:
    """dw[o, c, i, j]: serial over (n, oy, ox) row-major of g * x_padded (none: +0.0; fma:
    from +0.0, one fma per term); c counts the group's channels."""
    (sh, sw), (ph, pw), (kh, kw) = _pair(stride), _pair(padding), _pair(kernel)
    dh, dw_ = _pair(dilation)
    n_, o_, oh, ow = g.shape
    cg = x.shape[1] // groups
    og = o_ // groups
    dw = np.zeros((o_, cg, kh, kw), g.dtype)
    T = _T(g)
    step = _chain(T, inner)
    with np.errstate(all="ignore"):
        for o in range(o_):
            c0 = (o // og) * cg
            for c in range(cg):
                for i in range(kh):
                    for j in range(kw):
                        acc = None
                        for n in range(n_):
                            for oy in range(oh):
                                for ox in range(ow):
                                    acc = step(acc, T(g[n, o, oy, ox]),
                                               _xp(x, n, c0 + c, oy * sh + i * dh - ph,
                                                   ox * sw + j * dw_ - pw))
                        dw[o, c, i, j] = T(0.0) if acc is None else acc
    return dw


def loop_conv2d_grad_input(g: np.ndarray, w: np.ndarray, stride=1, padding=0,
                           size=(3, 3), inner="plain", dilation=1,
                           groups=1) -> np.ndarray:
    """dx[n, c, y, x]: serial over the taps (i, j) row-major reaching it of the tap's serial
    chain over the group's o of w * g (fma: from +0.0, one fma per term); the first tap
    starts, the taps' sum is plain adds under both contracts; none: +0.0. Also torch's
    conv_transpose2d of g by w."""
    (sh, sw), (ph, pw), (h, wd) = _pair(stride), _pair(padding), _pair(size)
    dh, dw = _pair(dilation)
    n_, o_, oh, ow = g.shape
    _, cg, kh, kw = w.shape
    og = o_ // groups
    dx = np.zeros((n_, cg * groups, h, wd), g.dtype)
    T = _T(g)
    step = _chain(T, inner)
    with np.errstate(all="ignore"):
        for n in range(n_):
            for c in range(cg * groups):
                o0, cl = (c // cg) * og, c % cg
                for yy in range(h):
                    for xx in range(wd):
                        acc = None
                        for i in range(kh):
                            for j in range(kw):
                                ty, tx = yy + ph - i * dh, xx + pw - j * dw
                                if ty < 0 or tx < 0 or ty % sh or tx % sw:
                                    continue
                                oy, ox = ty // sh, tx // sw
                                if oy >= oh or ox >= ow:
                                    continue
                                t = None
                                for o in range(o0, o0 + og):
                                    t = step(t, T(w[o, cl, i, j]), T(g[n, o, oy, ox]))
                                acc = t if acc is None else acc + t
                        dx[n, c, yy, xx] = T(0.0) if acc is None else acc
    return dx


def pool_out(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """Pooled length (torch's rule): floor or ceil of the room / stride, plus one, minus one
    in ceil mode when the last window would start at or past size + p."""
    room = size + 2 * p - d * (k - 1) - 1
    o = (-(-room // s) if ceil else room // s) + 1
    return o - 1 if ceil and (o - 1) * s >= size + p else o


def _pool_geom(x_shape: tuple, kernel, stride, padding=0, dilation=1, ceil_mode=False):
    kh, kw = _pair(kernel)
    sh, sw = (kh, kw) if stride is None else _pair(stride)
    (ph, pw), (dh, dw) = _pair(padding), _pair(dilation)
    return (kh, kw, sh, sw, ph, pw, dh, dw, pool_out(x_shape[2], kh, sh, ph, dh, ceil_mode),
            pool_out(x_shape[3], kw, sw, pw, dw, ceil_mode))


def _window(x_shape: tuple, oy: int, ox: int, g: tuple):
    """The in-input taps (y, x) of window (oy, ox) in row-major tap order."""
    kh, kw, sh, sw, ph, pw, dh, dw = g[:8]
    return [(oy * sh - ph + i * dh, ox * sw - pw + j * dw) for i in range(kh) for j in range(kw)
            if 0 <= oy * sh - ph + i * dh < x_shape[2] and 0 <= ox * sw - pw + j * dw < x_shape[3]]


def loop_window_choice(x: np.ndarray, n: int, c: int, oy: int, ox: int, kernel, stride,
                       padding=0, dilation=1, ceil_mode=False):
    """(y, x) of the element max-pool window (oy, ox) chooses, None for none: a serial scan of
    its in-input taps in tap order, a later element only when strictly greater, the first NaN
    ends the scan."""
    g = _pool_geom(x.shape, kernel, stride, padding, dilation, ceil_mode)
    best = bv = None
    for yy, xx in _window(x.shape, oy, ox, g):
        v = x[n, c, yy, xx]
        if v != v:
            return (yy, xx)
        if best is None or v > bv:
            best, bv = (yy, xx), v
    return best


def loop_max_pool2d(x: np.ndarray, kernel, stride=None, padding=0, dilation=1,
                    ceil_mode=False) -> np.ndarray:
    """The chosen element of each window (-inf where it holds no input element)."""
    return _loop_pick(x, x, kernel, stride, padding, dilation, ceil_mode, -np.inf)


def loop_max_pool2d_pick(v: np.ndarray, x: np.ndarray, kernel, stride=None, padding=0,
                         dilation=1, ceil_mode=False) -> np.ndarray:
    """v at the element each window of x chooses (+0.0 where it chooses none)."""
    return _loop_pick(v, x, kernel, stride, padding, dilation, ceil_mode, 0.0)


def _loop_pick(v, x, kernel, stride, padding, dilation, ceil_mode, empty) -> np.ndarray:
    oh, ow = _pool_geom(x.shape, kernel, stride, padding, dilation, ceil_mode)[8:]
    y = np.zeros(x.shape[:2] + (oh, ow), v.dtype)
    for n, c, oy, ox in np.ndindex(y.shape):
        at = loop_window_choice(x, n, c, oy, ox, kernel, stride, padding, dilation, ceil_mode)
        y[n, c, oy, ox] = empty if at is None else v[n, c, at[0], at[1]]
    return y


def _windows_of(yy: int, xx: int, x_shape, g):
    """The windows (oy, ox) holding (yy, xx) at some tap, in row-major order."""
    oh, ow = g[8:]
    return [(oy, ox) for oy in range(oh) for ox in range(ow)
            if (yy, xx) in _window(x_shape, oy, ox, g)]


def loop_max_pool2d_grad(g: np.ndarray, x: np.ndarray, kernel, stride=None, padding=0,
                         dilation=1, ceil_mode=False) -> np.ndarray:
    """dx: per element the serial sum over the windows (row-major) choosing it of g."""
    geo = _pool_geom(x.shape, kernel, stride, padding, dilation, ceil_mode)
    dx = np.zeros(x.shape, g.dtype)
    T = _T(g)
    with np.errstate(all="ignore"):
        for n, c, yy, xx in np.ndindex(x.shape):
            acc = None
            for oy, ox in _windows_of(yy, xx, x.shape, geo):
                if loop_window_choice(x, n, c, oy, ox, kernel, stride, padding, dilation,
                                      ceil_mode) == (yy, xx):
                    t = T(g[n, c, oy, ox])
                    acc = t if acc is None else acc + t
            dx[n, c, yy, xx] = T(0.0) if acc is None else acc
    return dx


def _divisor(x_shape, oy: int, ox: int, geo, count_include_pad: bool) -> int:
    """torch's average-pool divisor of window (oy, ox)."""
    kh, kw, sh, sw, ph, pw = geo[:6]
    hs, ws = oy * sh - ph, ox * sw - pw
    he, we = min(hs + kh, x_shape[2] + ph), min(ws + kw, x_shape[3] + pw)
    if count_include_pad:
        return (he - hs) * (we - ws)
    return (min(he, x_shape[2]) - max(hs, 0)) * (min(we, x_shape[3]) - max(ws, 0))


def loop_avg_pool2d(x: np.ndarray, kernel, stride=None, padding=0, ceil_mode=False,
                    count_include_pad=True) -> np.ndarray:
    """Per window: the serial sum of its in-input elements in tap order, then / divisor."""
    geo = _pool_geom(x.shape, kernel, stride, padding, 1, ceil_mode)
    T = _T(x)
    y = np.zeros(x.shape[:2] + geo[8:], x.dtype)
    with np.errstate(all="ignore"):
        for n, c, oy, ox in np.ndindex(y.shape):
            acc = None
            for yy, xx in _window(x.shape, oy, ox, geo):
                v = T(x[n, c, yy, xx])
                acc = v if acc is None else acc + v
            y[n, c, oy, ox] = T(0.0) if acc is None else \
                acc / T(_divisor(x.shape, oy, ox, geo, count_include_pad))
    return y


def loop_avg_pool2d_grad(g: np.ndarray, kernel, stride=None, size=(2, 2), padding=0,
                         ceil_mode=False, count_include_pad=True) -> np.ndarray:
    """dx: per element the serial sum over the windows (row-major) holding it of
    g / divisor; none: +0.0."""
    shape = g.shape[:2] + tuple(_pair(size))
    geo = _pool_geom(shape, kernel, stride, padding, 1, ceil_mode)
    T = _T(g)
    dx = np.zeros(shape, g.dtype)
    with np.errstate(all="ignore"):
        for n, c, yy, xx in np.ndindex(shape):
            acc = None
            for oy, ox in _windows_of(yy, xx, shape, geo):
                t = T(g[n, c, oy, ox]) / T(_divisor(shape, oy, ox, geo, count_include_pad))
                acc = t if acc is None else acc + t
            dx[n, c, yy, xx] = T(0.0) if acc is None else acc
    return dx


def _adaptive(size: int, out: int, o: int) -> range:
    """torch's adaptive window o of ``out`` over ``size``: [floor(o*size/out),
    ceil((o+1)*size/out))."""
    return range(math.floor(o * size / out), math.ceil((o + 1) * size / out))


def loop_adaptive_avg_pool2d(x: np.ndarray, output_size) -> np.ndarray:
    """Per adaptive window: the serial sum row-major, then / its element count."""
    oh, ow = _pair(output_size)
    T = _T(x)
    y = np.zeros(x.shape[:2] + (oh, ow), x.dtype)
    with np.errstate(all="ignore"):
        for n, c, oy, ox in np.ndindex(y.shape):
            rows, cols = _adaptive(x.shape[2], oh, oy), _adaptive(x.shape[3], ow, ox)
            acc = None
            for yy in rows:
                for xx in cols:
                    acc = T(x[n, c, yy, xx]) if acc is None else acc + T(x[n, c, yy, xx])
            y[n, c, oy, ox] = acc / T(len(rows) * len(cols))
    return y


def loop_adaptive_avg_pool2d_grad(g: np.ndarray, size) -> np.ndarray:
    """dx: per element the serial sum over the adaptive windows (row-major) holding it of
    g / count; none: +0.0."""
    h, w = _pair(size)
    oh, ow = g.shape[2:]
    T = _T(g)
    dx = np.zeros(g.shape[:2] + (h, w), g.dtype)
    with np.errstate(all="ignore"):
        for n, c, yy, xx in np.ndindex(dx.shape):
            acc = None
            for oy in range(oh):
                for ox in range(ow):
                    rows, cols = _adaptive(h, oh, oy), _adaptive(w, ow, ox)
                    if yy in rows and xx in cols:
                        t = T(g[n, c, oy, ox]) / T(len(rows) * len(cols))
                        acc = t if acc is None else acc + t
            dx[n, c, yy, xx] = T(0.0) if acc is None else acc
    return dx
