"""tanh and sigmoid, correctly rounded in float64 and float32 (a fast path, a rare accurate
path: Ziv), built on the exponential cores of ``gtensor.scalar.crexp``.

tanh: with a = |x| (tanh is odd; the sign is put back exactly) and H = expm1(2a)/2 (crexp's
halved double-double, relative error <= EPS_EXPM1 = 2^-75.6), tanh(a) = H / (H + 1): the
denominator split exactly (a two-sum), the quotient as a double-double (its remainder exact by
fma). The relative sensitivity of H/(H+1) to H is 1/(1+H) <= 1, so the bound is EPS_EXPM1 plus
2^-100 for the division and the sums. Decided: |x| < 2^-27: x (tanh x = x - x^3/3 rounds to x);
|x| > 20: +-1 (1 - tanh = 2/(e^2a + 1) < 2^-57); NaN: NaN. Accurate: the same formula in
triple-double (crexp's accurate expm1, ``multi.td_div``).

sigmoid: with E = e^-|x| = (h + lo) 2^k (crexp.exp_dd, relative error <= EPS_EXP = 2^-74.2),
sigmoid(x) = 1/(1 + E) for x >= 0 and E/(1 + E) for x < 0 (the same number; neither form
cancels or overflows); 1 + E split exactly, the quotient a double-double; for x < 0 the
quotient of the unscaled (h + lo) is scaled by 2^k after the rounding (exact). Sensitivity to
E: at most 1 (E/(1+E) for x < 0, 1/2 for x >= 0): bound EPS_EXP + 2^-100. Decided: x > 40: 1
(E < 2^-57); x below -745.1332191019411: +0 (e^x rounds to 0, and sigmoid(x) < e^x); NaN.
Results in the subnormal range (x < -708.39) and the rounding test's failures take the
accurate path: triple-double e^-|x| (``accurate.td_exp``), the division in triple-double,
rounded once (onto the subnormal grid exactly where needed).
"""

from __future__ import annotations

from . import accurate as A
from . import crdata_exp as D
from . import crexp as X
from . import multi as M
from .dsl import F32, F64, ScalarFn, scalar_fn

ROUND_MARGIN = 1.0 + 2.0 ** -20
EPS_TANH = D.EPS_EXPM1 + 2.0 ** -100
EPS_SIG = D.EPS_EXP + 2.0 ** -100
TANH_TINY, TANH_ONE = 2.0 ** -27, 20.0
SIG_ONE = 40.0


# --------------------------------------------------------------------------- tanh
def _tanh_specials(m, x):
    """(decided, value) of tanh."""
    nan = m.isnan(x)
    a = m.fabs(x)
    tiny = a < TANH_TINY
    value = m.where(nan, x + x, m.where(tiny, x, m.where(x < 0.0, m.const(-1.0, x), 1.0)))
    return nan | (a > TANH_ONE) | tiny, value


def _tanh_fast(m, x):
    """(h, lo, err, decided, value) for float64 x: tanh(|x|) as a double-double."""
    decided, value = _tanh_specials(m, x)
    a = m.where(decided, 0.5, m.fabs(x))
    hh, hl, _, _, _ = X._fast(m, a + a)  # H = expm1(2a) / 2
    dh, dl = M.two_sum(hh, 1.0)
    dl = dl + hl
    q0 = hh / dh
    rem = m.fma(-q0, dh, hh) + (hl - q0 * dl)
    h, lo = M.fast_two_sum(q0, rem / dh)
    err = h * (EPS_TANH * ROUND_MARGIN)
    return h, lo, err, decided, value


@scalar_fn("gt_tanh_td", (F64,), (F64, F64, F64), cold=True)
def _tanh_acc_td(m, x):
    """tanh(|x|) as a TD for 2^-27 <= |x| <= 20 (the accurate path's core, compiled once)."""
    hh = m.call_multi(X.expm1_td, m.fabs(x) * 2.0)  # expm1(2a) / 2
    return M.td_div(m, hh, M.td_add_d(hh, 1.0))


@scalar_fn("gt_tanh_acc_f64", (F64,), F64, cold=True)
def tanh_acc_f64(m, x):
    """tanh(x) for float64 by the accurate path alone (correctly rounded)."""
    decided, value = _tanh_specials(m, x)
    r = M.round_td_f64(m, m.call_multi(_tanh_acc_td, m.where(decided, 0.5, x)))
    return m.where(decided, value, m.where(x < 0.0, -r, r))


@scalar_fn("gt_tanh_acc_f32", (F64,), F32, cold=True)
def tanh_acc_f32(m, x):
    """tanh of a widened float32 by the accurate path, rounded once to float32."""
    decided, value = _tanh_specials(m, x)
    r = M.round_td_f32(m, m.call_multi(_tanh_acc_td, m.where(decided, 0.5, x)))
    return m.where(decided, m.to_f32(value), m.where(x < 0.0, -r, r))


@scalar_fn("gt_tanh_f64", (F64,), F64)
def tanh_f64(m, x):
    """tanh(x) for float64, correctly rounded."""
    h, lo, err, decided, value = _tanh_fast(m, x)
    r, ok = M.round_dd_f64(h, lo, err)
    return m.rare(ok | decided, m.where(decided, value, m.where(x < 0.0, -r, r)),
                  tanh_acc_f64, x)


@scalar_fn("gt_tanh_f32", (F32,), F32)
def tanh_f32(m, x32):
    """tanh(x) for float32, correctly rounded."""
    x = m.to_f64(x32)
    h, lo, _, decided, value = _tanh_fast(m, x)
    r, ok = M.round_dd_f32(m, h, lo, None)  # EPS_TANH < 2^-60: no err check
    return m.rare(ok | decided, m.where(decided, m.to_f32(value), m.where(x < 0.0, -r, r)),
                  tanh_acc_f32, x)


# --------------------------------------------------------------------------- sigmoid
def _sig_specials(m, x):
    """(decided, value) of sigmoid."""
    nan = m.isnan(x)
    one = x > SIG_ONE
    value = m.where(nan, x + x, m.where(one, m.const(1.0, x), 0.0))
    return nan | one | (x < X.EXP_UNDER), value


def _sig_fast(m, x):
    """(h, lo, k, err, decided, value, sub): sigmoid(x) = (h + lo) 2^k (k = 0 for x >= 0)."""
    decided, value = _sig_specials(m, x)
    xs = m.where(decided, 0.0, x)
    neg = xs < 0.0
    eh, el, k = X.exp_dd(m, -m.fabs(xs))  # E = (eh + el) 2^k, k <= 0
    kd = m.where(k < -1022, k * 0 - 1022, k)  # the denominator's E: any tiny value serves
    sc = X._pow2(m, kd)
    dh, dl = M.fast_two_sum(1.0, eh * sc)
    dl = dl + el * sc
    nh = m.where(neg, eh, 1.0)
    nl = m.where(neg, el, 0.0)
    q0 = nh / dh
    rem = m.fma(-q0, dh, nh) + (nl - q0 * dl)
    h, lo = M.fast_two_sum(q0, rem / dh)
    err = h * (EPS_SIG * ROUND_MARGIN)
    return h, lo, m.where(neg, k, k * 0), err, decided, value, x < X.EXP_SUB


@scalar_fn("gt_sigmoid_td", (F64,), (F64, F64, F64, F64), cold=True)
def _sig_td(m, x):
    """sigmoid(x) = Q 2^k as (Q0, Q1, Q2, k) for a finite x in [-745.14, 40] (the accurate
    path's core, compiled once)."""
    neg = x < 0.0
    e, kf = A.td_exp(m, -m.fabs(x), x * 0.0)
    k = m.f2i(kf)
    kd = m.where(k < -1022, k * 0 - 1022, k)
    den = M.td_add_d(A.td_scale(m, e, kd), 1.0)
    zero = x * 0.0
    num = tuple(m.where(neg, a, b) for a, b in zip(e, (zero + 1.0, zero, zero)))
    q = M.td_div(m, num, den)
    return (*q, m.i2f(m.where(neg, k, k * 0)))


def _sig_acc(m, x, f32):
    """The accurate sigmoid of a finite x in [-745.14, 40], rounded once."""
    q0, q1, q2, kf = m.call_multi(_sig_td, x)
    q, kq = (q0, q1, q2), m.f2i(kf)
    if f32:
        return M.round_td_f32(m, A.td_scale(m, q, m.where(kq < -1022, kq * 0 - 1022, kq)))
    normal = X._scale(m, M.round_td_f64(m, q), kq)
    ks = m.where(kq < -1021, kq, kq * 0 - 1075)
    sub = X._scale(m, X._grid(m, q, -1074 - ks), ks)
    return m.where(kq < -1021, sub, normal)


@scalar_fn("gt_sigmoid_acc_f64", (F64,), F64, cold=True)
def sigmoid_acc_f64(m, x):
    """sigmoid(x) for float64 by the accurate path alone (correctly rounded)."""
    decided, value = _sig_specials(m, x)
    return m.where(decided, value, _sig_acc(m, m.where(decided, 0.0, x), False))


@scalar_fn("gt_sigmoid_acc_f32", (F64,), F32, cold=True)
def sigmoid_acc_f32(m, x):
    """sigmoid of a widened float32 by the accurate path, rounded once to float32."""
    decided, value = _sig_specials(m, x)
    r = _sig_acc(m, m.where(decided, 0.0, x), True)
    return m.where(decided, m.to_f32(value), r)


@scalar_fn("gt_sigmoid_f64", (F64,), F64)
def sigmoid_f64(m, x):
    """1/(1 + e^-x) for float64, correctly rounded."""
    h, lo, k, err, decided, value, sub = _sig_fast(m, x)
    r, ok = M.round_dd_f64(h, lo, err)
    return m.rare((ok & ~sub) | decided, m.where(decided, value, X._scale(m, r, k)),
                  sigmoid_acc_f64, x)


# float32's double-double stage, out of line: the first stage's failures (below)
@scalar_fn("gt_sigmoid_dd_f32", (F64,), F32, cold=True)
def sigmoid_dd_f32(m, x):
    """sigmoid of a widened float32 by the double-double fast path, then the accurate
    path."""
    h, lo, k, _, decided, value, _ = _sig_fast(m, x)
    kk = m.where(k < -200, k * 0 - 200, k)  # float32 inputs: k >= -150; 2^k exact
    r, ok = M.round_dd_f32(m, h * X._pow2(m, kk), lo, None)  # EPS_SIG < 2^-60
    return m.rare(ok | decided, m.where(decided, m.to_f32(value), r), sigmoid_acc_f32, x)


# float32's first stage: E = e^-|x| by crexp's float32 first stage (plain double, within
# 2^-51 relative; below x = -138 its scaling is clamped at 2^-200, where sigmoid's float32
# result is +0 all the same), then 1/(1 + E) (x >= 0) or E/(1 + E) (x < 0) in double: the
# sensitivity to E is at most 1, the sum and the quotient round once each, so
# |y - sigmoid| <= (2^-51 + 2u) |y| < 2^-50 |y|. The rounding test of ``multi.round_d_f32``
# uses err = EPS32 |y| (8x that); its failures take the double-double stage above. Every
# float32 input is checked exhaustively (``tests/test_crmath_exhaustive.py``).
EPS32 = 2.0 ** -47


def sig_fast32(m, x):
    """(y, err, decided, value) for a widened float32 x: sigmoid(x) in plain double within
    err, and the decided lanes (NaN, x > 40, x below exp's underflow) with their value."""
    decided, value = _sig_specials(m, x)
    xs = m.where(decided, 0.0, x)
    e, _, _, _ = X.fast32(m, -m.fabs(xs))
    d = e + 1.0
    y = m.where(xs < 0.0, e / d, 1.0 / d)
    return y, m.fabs(y) * EPS32, decided, value


@scalar_fn("gt_sigmoid_f32", (F32,), F32)
def sigmoid_f32(m, x32):
    """1/(1 + e^-x) for float32, correctly rounded: the plain-double first stage, its failures
    by the double-double stage."""
    x = m.to_f64(x32)
    y, err, decided, value = sig_fast32(m, x)
    r, ok = M.round_d_f32(m, y, err)
    return m.rare(ok | decided, m.where(decided, m.to_f32(value), r), sigmoid_dd_f32, x)


TANH_F64: ScalarFn = tanh_f64
TANH_F32: ScalarFn = tanh_f32
SIGMOID_F64: ScalarFn = sigmoid_f64
SIGMOID_F32: ScalarFn = sigmoid_f32
ALL = [TANH_F64, TANH_F32, SIGMOID_F64, SIGMOID_F32]


class _Hooks:
    """A function's test hooks (``accurate_needed``, ``fast_dd``), as crmath.Function reads."""

    def __init__(self, parts, eps):
        self._parts, self._eps = parts, eps

    def _run(self, x):
        import numpy as np

        from .dsl import NUMPY

        x = np.asarray(x, dtype=np.float64)
        with np.errstate(all="ignore"):
            out = self._parts(NUMPY, x)
        if len(out) == 5:  # tanh: (h, lo, err, decided, value)
            h, lo, err, decided, _ = out
            return x, h, lo, 0 * np.asarray(h, dtype=np.int64), err, decided, np.zeros_like(decided)
        return (x, *out[:5], out[6])

    def accurate_needed(self, x, f32: bool = False):
        """Which float64 elements of ``x`` the accurate path computes (numpy)."""
        import numpy as np

        from .dsl import NUMPY

        x, h, lo, k, err, decided, sub = self._run(x)
        with np.errstate(all="ignore"):
            if f32:
                kk = np.maximum(k, -200)
                _, ok = M.round_dd_f32(NUMPY, h * X._pow2(NUMPY, kk), lo, None)
            else:
                _, ok = M.round_dd_f64(h, lo, err)
                ok = ok & ~sub
        return ~(ok | decided)

    def fast_dd(self, x):
        """(h, lo, relative error bound, lanes the bound covers) of the fast path (numpy)."""
        import numpy as np

        from .dsl import NUMPY

        x, h, lo, k, _, decided, sub = self._run(x)
        with np.errstate(all="ignore"):
            sc = X._scale(NUMPY, np.ones_like(h), k)
        # (where the scaled low part stays normal: below, the check itself would round)
        return h * sc, lo * sc, np.full(x.shape, self._eps), ~decided & ~sub & (k > -960)


TANH_HOOKS = _Hooks(_tanh_fast, EPS_TANH)
SIGMOID_HOOKS = _Hooks(_sig_fast, EPS_SIG)
