"""log1p and log, correctly rounded in float64 and float32 (a fast path, a rare accurate path:
Ziv). log's fast path is ``log_lean`` below; log1p's is built on it.

log1p's fast path (every element): u = 1 + x is split exactly, uh + ul (a two-sum; uh >=
2^-53 is a normal double for x > -1), and log1p(x) = log(uh) + log1p(t), t = ul/uh
(|t| <= 2^-53):

* log(uh) by ``log_lean`` (512 intervals, exact z, |z| < 2^-9.42), with its per-element
  absolute bound 2^-88 |y| + 2^-51 |z|^3. Near x = 0, uh lies in interval 0 with e = 0 and
  r_0 = 1, so log(uh) = log1p(z), z = uh - 1 exact, and the bound stays relative to the result.
* log1p(t) = t - t^2/2 with t as q + (ul - q uh)/uh (the division's remainder exact by fma).
* The two are summed as double-doubles; log1p(t) and the sum (at most ~2x cancellation) add
  2^-100 |y| (SUM_REL) to the bound, which the rounding test uses per element.
* Decided lanes: |x| < 2^-60: x (log1p(x) = x - x^2/2 rounds to x; +-0 and subnormals kept);
  x = -1: -inf; x < -1: NaN; +inf: +inf; NaN: NaN.

Accurate path (cold): for |x| < 2^-6 the series sum (-1)^(n+1) x^n / n in triple-double
(25 terms); otherwise one Newton step on exp from the fast double-double y0: with
d = (1 + x) exp(-y0) - 1 (``accurate.td_exp``, 1 + x exact), log1p(x) = y0 + d - d^2/2
(+ O(d^3), d ~ 2^-75): absolute error ~2^-139, relative < 2^-131 since |log1p(x)| > 2^-6.1.
"""

from __future__ import annotations

from . import accurate as A
from . import crdata_log as D
from . import multi as M
from .dsl import F32, F64, ScalarFn, Table, scalar_fn

TINY = 2.0 ** -60  # below: log1p(x) rounds to x
SERIES_BELOW = 2.0 ** -6  # the accurate path's series range
SERIES_TERMS = 25  # (2^-6)^24 / 25 < 2^-148
ROUND_MARGIN = 1.0 + 2.0 ** -20
SUM_REL = 2.0 ** -100  # log1p(t) and the final double-double sum, relative to the result


def _fast(m, x):
    """(h, lo, err, decided, value) for float64 x: log1p(x) as a double-double, its absolute
    error bound, and the lanes decided without it with their value."""
    nan = m.isnan(x)
    tiny = m.fabs(x) < TINY
    neg1 = x == -1.0
    below = x < -1.0
    inf = x == float("inf")
    decided = nan | tiny | neg1 | below | inf
    xs = m.where(decided, 1.0, x)
    uh, ul = M.two_sum(1.0, xs)
    sh, sl, err = log_lean(m, uh, 0.0 * uh)  # log(uh), uh a normal double >= 2^-53
    qt = ul / uh
    tl = m.fma(-qt, uh, ul) / uh - (qt * qt) * 0.5  # t = qt + tl, log1p(t) ~ t - t^2/2
    h, lo = M.dd_add((sh, sl), (qt, tl))
    err = (err + m.fabs(h) * SUM_REL) * ROUND_MARGIN
    value = m.where(nan, x + x, m.where(inf | tiny, x, m.where(neg1, m.const(-float("inf"), x),
                                                               float("nan"))))
    return h, lo, err, decided, value


def _series_td(m, x):
    """sum_{n=1}^{25} (-1)^(n+1) x^n / n as a TD, nested: x (1 - x (1/2 - x (1/3 - ...)))."""
    zero = x * 0.0
    one = (zero + 1.0, zero, zero)
    p = M.td_div_small(m, one, float(SERIES_TERMS))

    def step(m, j, p0, p1, p2):
        n = m.i2f(SERIES_TERMS - 1 - j)  # 24 .. 1
        inv = M.td_div_small(m, one, n)
        return M.td_add(inv, M.td_mul_d(m, (p0, p1, p2), -x))

    p = m.loop(SERIES_TERMS - 1, step, *p)
    return M.td_mul_d(m, p, x)


def _newton_td(m, x, h, lo, u=None):
    """log1p(x) from y0 = h + lo (|log1p(x)| > 2^-6.1): y0 + d - d^2/2, d = (1+x) e^-y0 - 1;
    or log(u) for a double-double ``u`` (then ``x`` is unused)."""
    e, k = A.td_exp(m, -h, -lo)
    ki = m.f2i(k)
    uh, ul = M.two_sum(1.0, x) if u is None else u
    # (1 + x) 2^k with k in [-1024, 54]: k = k1 + k2, each 2^kj normal, the product exact
    k1 = ((ki + 1100) >> 1) - 550
    k2 = ki - k1
    up = m.from_bits((k1 + 1023) << 52)
    dn = m.from_bits((k2 + 1023) << 52)
    u = ((uh * up) * dn, (ul * up) * dn, x * 0.0)
    w = M.td_add_d(M.td_mul(m, u, e), -1.0)  # d, exact to ~2^-139 absolute
    d2 = M.td_mul(m, w, w)
    corr = M.td_add(w, (d2[0] * -0.5, d2[1] * -0.5, d2[2] * -0.5))
    return M.td_add((h, lo, x * 0.0), corr)


@scalar_fn("gt_log1p_td", (F64,), (F64, F64, F64), cold=True)
def log1p_td(m, x):
    """log1p(x) as a TD (the accurate path's core, compiled once)."""
    return _accurate_td(m, x)


def _specials(m, x):
    """(decided, value) of log1p."""
    nan = m.isnan(x)
    tiny = m.fabs(x) < TINY
    neg1 = x == -1.0
    inf = x == float("inf")
    value = m.where(nan, x + x, m.where(inf | tiny, x, m.where(neg1, m.const(-float("inf"), x),
                                                               float("nan"))))
    return nan | tiny | neg1 | (x < -1.0) | inf, value


def _accurate_td(m, x):
    """log1p(x) as a TD for finite x > -1, |x| >= 2^-60."""
    small = m.fabs(x) < SERIES_BELOW
    xs = m.where(small, 0.25, x)
    h, lo, _, _, _ = _fast(m, xs)
    yn = _newton_td(m, xs, h, lo)
    ys = _series_td(m, m.where(small, x, 2.0 ** -7))
    return tuple(m.where(small, a, b) for a, b in zip(ys, yn))


@scalar_fn("gt_log1p_acc_f64", (F64,), F64, cold=True)
def log1p_acc_f64(m, x):
    """log1p(x) for float64 by the accurate path alone (correctly rounded)."""
    decided, value = _specials(m, x)
    live = m.where(decided, 0.5, x)
    r = M.round_td_f64(m, m.call_multi(log1p_td, live))
    return m.where(decided, value, r)


@scalar_fn("gt_log1p_acc_f32", (F64,), F32, cold=True)
def log1p_acc_f32(m, x):
    """log1p of a widened float32 by the accurate path, rounded once to float32."""
    decided, value = _specials(m, x)
    live = m.where(decided, 0.5, x)
    r = M.round_td_f32(m, m.call_multi(log1p_td, live))
    return m.where(decided, m.to_f32(value), r)


@scalar_fn("gt_log1p_f64", (F64,), F64)
def log1p_f64(m, x):
    """log(1 + x) for float64, correctly rounded (see the module docstring)."""
    h, lo, err, decided, value = _fast(m, x)
    r, ok = M.round_dd_f64(h, lo, err)
    return m.rare(ok | decided, m.where(decided, value, r), log1p_acc_f64, x)


@scalar_fn("gt_log1p_f32", (F32,), F32)
def log1p_f32(m, x32):
    """log(1 + x) for float32, correctly rounded (the float64 fast path rounded to float32)."""
    x = m.to_f64(x32)
    h, lo, err, decided, value = _fast(m, x)
    r, ok = M.round_dd_f32(m, h, lo, err)
    return m.rare(ok | decided, m.where(decided, m.to_f32(value), r), log1p_acc_f32, x)


# --------------------------------------------------------------------------- log
# log(x), correctly rounded: x (subnormals scaled by 2^54 first, exactly) goes straight into
# log_parts: the same table, polynomial and bound EPS as log1p's log(uh) (log1p(t) is absent).
# Decided: x < 0 (and -inf): NaN; +-0: -inf; +inf: +inf; 1: +0; NaN: NaN. Accurate path:
# near 1 (|x - 1| < 2^-6, x - 1 exact) log1p's series of x - 1, else one Newton step on the
# triple-double exp from the fast double-double, x kept exact: relative error < 2^-131.
TWO54 = 2.0 ** 54
LN2_TD = tuple(A.LN2)
R2_TAB = Table("gt_log_r2_tab", F64, tuple(D.R2))
T2_TAB = Table("gt_log_t2_tab", F64, tuple(D.T2))
LEAN_REL, LEAN_CUBE = 2.0 ** -88, 2.0 ** -51  # err = |h| LEAN_REL + |z|^3 LEAN_CUBE


def log_lean(m, v, kadj):
    """log(v 2^kadj) for a positive normal double v, as (h, lo, err): a leaner evaluation than
    log_parts (512 intervals, |z| < 2^-9.42): log1p(z) = z - z^2/2 + z^3 q(z) with z^2 exact
    (fma), q in double (Taylor to z^9); e ln2 - log(r_i) + z - z^2/2 summed by error-free
    transformations, everything below into one low word. The error, computed per element:
    the polynomial's coefficients and roundings <= 2^-51 |z|^3 (measured and counted:
    tools/gen_crmath_data.py), the table and the sums <= 2^-88 |h| (relative 2^-104 of terms
    at most 2^10 times the result)."""
    b = m.bits(v) + (1 << 42)  # adds 2^-10 to the mantissa: intervals centred on 1 + i/512
    ef = (b >> 52) - 1023
    i = (b >> 43) & ((1 << D.BITS2) - 1)
    mp_ = m.from_bits((m.bits(v) - ((ef + 1023) << 52)) + (1023 << 52))  # v 2^-e, exact
    z = m.fma(mp_, m.table(R2_TAB, i), -1.0)  # exact: r has 10 fractional bits, |z| < 2^-9
    zh2, zl2 = M.two_prod(m, z, z)
    q = D.Q2[-1]
    for c in reversed(D.Q2[:-1]):
        q = m.fma(q, z, c)
    z3 = z * zh2
    k = m.i2f(ef) + kadj  # exact
    s, e1 = M.two_sum(k * D.LN2_HI42, m.table(T2_TAB, 3 * i))  # k LN2_HI42 exact
    s, e2 = M.two_sum(s, z)
    s, e3 = M.fast_two_sum(s, -0.5 * zh2)  # |s| >= z^2/2 in every interval
    low = ((k * D.LN2_LO42 + m.table(T2_TAB, 3 * i + 1)) + ((e1 + e2) + e3)
           + (z3 * q - 0.5 * zl2))
    h, lo = M.fast_two_sum(s, low)
    err = m.fabs(h) * LEAN_REL + m.fabs(z3) * LEAN_CUBE
    return h, lo, err


def _log_specials(m, x):
    """(decided, value) of log."""
    nan = m.isnan(x)
    zero = x == 0.0
    inf = x == float("inf")
    one = x == 1.0
    value = m.where(nan, x + x, m.where(inf, x, m.where(zero, m.const(-float("inf"), x),
                                                        m.where(one, m.const(0.0, x),
                                                                float("nan")))))
    return nan | (x < 0.0) | zero | inf | one, value


def _log_fast(m, x):
    """(h, lo, err, decided, value) for float64 x: log(x) as a double-double."""
    decided, value = _log_specials(m, x)
    xs = m.where(decided, 2.0, x)
    sub = xs < 2.0 ** -1022
    v = m.where(sub, xs * TWO54, xs)
    h, lo, err = log_lean(m, v, m.where(sub, -54.0, 0.0 * v))
    return h, lo, err * ROUND_MARGIN, decided, value


@scalar_fn("gt_log_td", (F64,), (F64, F64, F64), cold=True)
def log_td(m, x):
    """log(x) as a TD (the accurate path's core, compiled once)."""
    return _log_accurate_td(m, x)


def _log_accurate_td(m, x):
    """log(x) as a TD for finite x > 0, x != 1."""
    near = m.fabs(x - 1.0) < SERIES_BELOW
    ys = _series_td(m, m.where(near, x - 1.0, 2.0 ** -7))
    xs = m.where(near, 2.0, x)
    sub = xs < 2.0 ** -1022
    v = m.where(sub, xs * TWO54, xs)
    h, lo, _, _, _ = _log_fast(m, v)  # log(v): v is normal
    yn = _newton_td(m, v, h, lo, (v, v * 0.0))
    shift = M.td_mul_d(m, LN2_TD, v * 0.0 - 54.0)  # (a traced value: C mode needs one)
    yn = tuple(m.where(sub, a, b) for a, b in zip(M.td_add(yn, shift), yn))
    return tuple(m.where(near, a, b) for a, b in zip(ys, yn))


@scalar_fn("gt_log_acc_f64", (F64,), F64, cold=True)
def log_acc_f64(m, x):
    """log(x) for float64 by the accurate path alone (correctly rounded)."""
    decided, value = _log_specials(m, x)
    r = M.round_td_f64(m, m.call_multi(log_td, m.where(decided, 2.0, x)))
    return m.where(decided, value, r)


@scalar_fn("gt_log_acc_f32", (F64,), F32, cold=True)
def log_acc_f32(m, x):
    """log of a widened float32 by the accurate path, rounded once to float32."""
    decided, value = _log_specials(m, x)
    r = M.round_td_f32(m, m.call_multi(log_td, m.where(decided, 2.0, x)))
    return m.where(decided, m.to_f32(value), r)


@scalar_fn("gt_log_f64", (F64,), F64)
def log_f64(m, x):
    """log(x) for float64, correctly rounded."""
    h, lo, err, decided, value = _log_fast(m, x)
    r, ok = M.round_dd_f64(h, lo, err)
    return m.rare(ok | decided, m.where(decided, value, r), log_acc_f64, x)


@scalar_fn("gt_log_f32", (F32,), F32)
def log_f32(m, x32):
    """log(x) for float32, correctly rounded."""
    x = m.to_f64(x32)
    h, lo, err, decided, value = _log_fast(m, x)
    r, ok = M.round_dd_f32(m, h, lo, err)
    return m.rare(ok | decided, m.where(decided, m.to_f32(value), r), log_acc_f32, x)


LOG_F64: ScalarFn = log_f64
LOG_F32: ScalarFn = log_f32


class _LogHooks:
    """log's test hooks (``accurate_needed``, ``fast_dd``)."""

    @staticmethod
    def accurate_needed(x, f32: bool = False):
        """Which float64 elements of ``x`` the accurate path computes (numpy)."""
        import numpy as np

        from .dsl import NUMPY

        x = np.asarray(x, dtype=np.float64)
        with np.errstate(all="ignore"):
            h, lo, err, decided, _ = _log_fast(NUMPY, x)
            _, ok = (M.round_dd_f32(NUMPY, h, lo, err) if f32 else M.round_dd_f64(h, lo, err))
        return ~(ok | decided)

    @staticmethod
    def fast_dd(x):
        """(h, lo, relative error bound, lanes the bound covers) of the fast path (numpy)."""
        import numpy as np

        from .dsl import NUMPY

        x = np.asarray(x, dtype=np.float64)
        with np.errstate(all="ignore"):
            h, lo, err, decided, _ = _log_fast(NUMPY, x)
            return h, lo, err / np.abs(h), ~decided


LOG_HOOKS = _LogHooks()

LOG1P_F64: ScalarFn = log1p_f64
LOG1P_F32: ScalarFn = log1p_f32
ALL = [LOG1P_F64, LOG1P_F32]


def accurate_needed(x, f32: bool = False):
    """Which float64 elements of ``x`` the accurate path computes (numpy; tests, the rate)."""
    import numpy as np

    from .dsl import NUMPY

    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        h, lo, err, decided, _ = _fast(NUMPY, x)
        _, ok = (M.round_dd_f32(NUMPY, h, lo, err) if f32 else M.round_dd_f64(h, lo, err))
    return ~(ok | decided)


def fast_dd(x):
    """(h, lo, relative error bound, lanes the bound covers) of the fast path (numpy)."""
    import numpy as np

    from .dsl import NUMPY

    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        h, lo, err, decided, _ = _fast(NUMPY, x)
        return h, lo, err / np.abs(h), ~decided & (h != 0.0)
